/// The reads that describe the table as a whole, for the status snapshot and the tools that inspect a
/// database: sums, checks of the table's shape, outliers.
extension AttachmentStore {
    /// ``CachePolicy/classify(_:)`` as an SQL expression over the table's columns, for queries that count
    /// bytes by class without reading every record (the status snapshot) and for ``evictable(in:)``. Tests
    /// check it agrees with ``CachePolicy/classify(_:)`` on every combination of the columns involved.
    static let cacheClassSQL = """
        CASE WHEN local_uri IS NULL THEN NULL \
        WHEN coalesce(pinned, 0) = 1 THEN 'pinned' \
        WHEN coalesce(has_synced, 0) = 0 THEN 'notUploaded' \
        WHEN (state = \(AttachmentState.archived.rawValue) AND given_up IS NULL) \
        OR (state = \(AttachmentState.synced.rawValue) AND coalesce(on_demand, 0) = 1) THEN 'evictable' \
        ELSE 'kept' END
        """

    /// A record's size as sums count it: an integer of at least 0, else `NULL`. A size of another storage
    /// class (text, real, blob) or a negative one is not a byte count: sums leave it out, and the status
    /// counts it as invalid. Sums are `total()` (floating point, which no row count or size overflows: exact
    /// up to 2^53 bytes, 8 PiB) cast back to an integer, which SQLite saturates at `Int64.max`.
    static let countedSizeSQL = "(CASE WHEN typeof(size) = 'integer' AND size >= 0 THEN size END)"

    /// Whether a record's size is there but not a byte count (see ``countedSizeSQL``).
    static let invalidSizeSQL = "(size IS NOT NULL AND \(countedSizeSQL) IS NULL)"

    /// The status rows that list records rather than sum them, each read through an index: kind 1 a transfer
    /// waiting for its retry, kind 2 a given-up transfer, kind 5 the totals of transfers handed off (by
    /// state). ``statusScan(largest:invalidLimit:in:)`` makes the rows of the sums: kind 0 totals by state
    /// (the records of unknown size in `attempts`, of an invalid size in `next`), 3 the content never
    /// uploaded, 4 local bytes by ``CachePolicy/Class`` (its name in `id`). `QueueStatus` reads them all.
    var statusListsSQL: String {
        """
        SELECT 1 AS kind, state, NULL AS n, NULL AS bytes, coalesce(awaiting_upload, 0) AS local, id, attempts,
               next_attempt_at AS next, last_error AS err, connectivity_failure AS net, local_unavailable AS lfs,
               key_unavailable AS kua
        FROM \(table) WHERE next_attempt_at IS NOT NULL AND state IN \(StateSet.queuedSQL)
        UNION ALL
        SELECT 2, given_up, NULL, NULL, 0, id, attempts,
               CASE WHEN local_uri IS NOT NULL AND coalesce(has_synced, 0) = 0 THEN 1 ELSE 0 END, last_error, NULL, NULL, NULL
        FROM \(table) WHERE given_up IS NOT NULL AND state = \(AttachmentState.archived.rawValue)
        """ + handedOffStatusSQL
    }

    /// The status rows of transfers handed to a background service (totals by the attachment's
    /// state), when the queue hands transfers off.
    private var handedOffStatusSQL: String {
        guard let scope = handOffScope else { return "" }
        let size = Self.countedSizeSQL
        return """

            UNION ALL
            SELECT 5, a.state, count(*), CAST(total(\(size)) AS INTEGER), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL
            FROM \(HandOffStore.table) h JOIN \(table) a ON a.id = h.attachment_id WHERE h.scope = \(scope)
            GROUP BY a.state
            """
    }

    /// Throws ``AttachmentError/Code-swift.struct/invalidConfiguration`` naming the table unless it exists
    /// with every attachment column.
    func checkTable(in tx: SqlTransaction) throws {
        let present = try columnNames(in: tx)
        let table = unquotedName
        guard !present.isEmpty else {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "the database has no table \(String(reflecting: table)); add "
                    + "createAttachmentTable(name: \(String(reflecting: table))) to its Schema",
                name: table)
        }
        let missing = (["id"] + AttachmentColumn.allCases.map(\.name)).filter { !present.contains($0) }
        guard missing.isEmpty else {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "table \(String(reflecting: table)) lacks the attachment columns "
                    + missing.joined(separator: ", ") + "; declare it with createAttachmentTable(name:)",
                name: table)
        }
    }

    /// How many records are in each state (through the state index); a state that is not one is left out.
    func countsByState(in tx: SqlTransaction) throws -> [AttachmentState: Int] {
        var counts: [AttachmentState: Int] = [:]
        try tx.cached.forEachRow(sql: "SELECT state, count(*) AS n FROM \(table) GROUP BY state", parameters: []) {
            cursor in
            if case .integer(let raw) = try cursor.getValue(name: "state"),
                let state = Int(exactly: raw).flatMap(AttachmentState.init(rawValue:))
            {
                counts[state] = try cursor.getInt(name: "n")
            }
            return true
        }
        return counts
    }

    /// How many records the table holds.
    func count(in tx: SqlTransaction) throws -> Int {
        try tx.cached.get(sql: "SELECT count(*) AS n FROM \(table)") { try $0.getInt(name: "n") }
    }

    /// The names of the columns the table has, to check it before the queue starts.
    func columnNames(in tx: SqlTransaction) throws -> Set<String> {
        Set(
            try tx.cached.getAll(sql: "SELECT name FROM pragma_table_info(?)", parameters: [unquotedName]) {
                try $0.getString(name: "name").lowercased()
            })
    }

    private var unquotedName: String {
        String(table.dropFirst().dropLast()).replacingOccurrences(of: "\"\"", with: "\"")
    }

    /// Calls `body` with the filename of every record, whatever its state (the id when it has none, as the
    /// queue reads it), one row at a time. Only the names are read: a record whose other columns hold
    /// values the queue would refuse (a size that is text, say) is still counted.
    func forEachFilename(in tx: SqlTransaction, _ body: (String) throws -> Void) throws {
        try tx.forEachRow(sql: "SELECT id, filename FROM \(table)", parameters: []) { cursor in
            try body(try cursor.getStringOptional(name: "filename") ?? cursor.getString(name: "id"))
            return true
        }
    }
}
