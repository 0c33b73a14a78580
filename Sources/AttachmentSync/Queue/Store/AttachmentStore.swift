import Foundation

/// The SQL the queue runs against its attachments table. Every state change is conditional on the state
/// the caller last saw (`WHERE id = ? AND state = ?`), so a stale decision never overwrites a newer one;
/// each method returns whether its row changed.
struct AttachmentStore: Sendable {
    let table: String

    init(table: String) {
        self.table = SqlIdentifier.quote(table)
    }

    // MARK: Reads

    func record(id: String, in tx: SqlTransaction) throws -> AttachmentRecord? {
        try tx.getOptional(sql: "SELECT \(AttachmentRecord.columns) FROM \(table) WHERE id = ?", parameters: [id]) {
            try AttachmentRecord(cursor: $0)
        }
    }

    func records(in tx: SqlTransaction, where condition: String = "1", parameters: SqlParameters = [])
        throws -> [AttachmentRecord]
    {
        try tx.getAll(
            sql: "SELECT \(AttachmentRecord.columns) FROM \(table) WHERE \(condition) ORDER BY timestamp, id",
            parameters: parameters
        ) { try AttachmentRecord(cursor: $0) }
    }

    /// The records of `ids` that exist, oldest first; read in batches to stay under SQLite's limit on
    /// query parameters.
    func records(ids: Set<String>, in tx: SqlTransaction) throws -> [AttachmentRecord] {
        var records: [AttachmentRecord] = []
        let ids = Array(ids)
        let batchSize = 500
        for start in stride(from: 0, to: ids.count, by: batchSize) {
            let batch = ids[start..<min(start + batchSize, ids.count)]
            let placeholders = Array(repeating: "?", count: batch.count).joined(separator: ", ")
            records += try self.records(
                in: tx, where: "id IN (\(placeholders))", parameters: batch.map { $0 as (any SqlValueConvertible)? })
        }
        return records.sorted { ($0.timestamp, $0.id) < ($1.timestamp, $1.id) }
    }

    /// Records waiting for a transfer whose retry time (if any) has come by `now` (milliseconds since
    /// 1970), oldest first; at most `limit` of them.
    func queued(limit: Int, readyAt now: Int64, in tx: SqlTransaction) throws -> [AttachmentRecord] {
        try tx.getAll(
            sql: """
                SELECT \(AttachmentRecord.columns) FROM \(table)
                WHERE state IN (?, ?, ?) AND (next_attempt_at IS NULL OR next_attempt_at <= ?)
                ORDER BY timestamp, id LIMIT ?
                """,
            parameters: [
                AttachmentState.queuedDownload.rawValue, AttachmentState.queuedUpload.rawValue,
                AttachmentState.queuedDelete.rawValue, now, limit,
            ]
        ) { try AttachmentRecord(cursor: $0) }
    }

    /// The soonest retry time after `now` among queued records, if any.
    func earliestRetry(after now: Int64, in tx: SqlTransaction) throws -> Int64? {
        try tx.get(
            sql:
                "SELECT min(next_attempt_at) AS soonest FROM \(table) WHERE state IN (0, 1, 2) AND next_attempt_at > ?",
            parameters: [now]
        ) { try $0.getInt64Optional(name: "soonest") }
    }

    /// A query whose result changes whenever a record enters or leaves a queued state (every write of the
    /// queue moves `timestamp` forward), for the sync trigger's watch.
    var queuedSignalSQL: String {
        "SELECT count(*) AS n, max(timestamp) AS latest FROM \(table) WHERE state IN (0, 1, 2)"
    }

    // MARK: Writes

    func insert(_ record: AttachmentRecord, in tx: SqlTransaction) throws {
        try tx.execute(
            sql: """
                INSERT INTO \(table)
                    (id, filename, state, timestamp, has_synced, local_uri, media_type, size, meta_data, content_hash,
                     on_demand, pinned, last_used_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            parameters: [
                record.id, record.filename, record.state.rawValue, record.timestamp, record.hasSynced,
                record.localPath, record.mediaType, record.size, record.metaData, record.contentHash,
                record.onDemand, record.pinned, record.lastUsedAt,
            ]
        )
    }

    /// Moves a record from `expected` to `newState`, setting the given extra columns.
    @discardableResult
    func transition(
        id: String,
        from expected: AttachmentState,
        to newState: AttachmentState,
        timestamp: Int64,
        set assignments: [(column: String, value: (any SqlValueConvertible)?)] = [],
        in tx: SqlTransaction
    ) throws -> Bool {
        var sql = "UPDATE \(table) SET state = ?, timestamp = ?"
        var parameters: SqlParameters = [newState.rawValue, timestamp]
        for assignment in assignments {
            sql += ", \(SqlIdentifier.quote(assignment.column)) = ?"
            parameters.append(assignment.value)
        }
        sql += " WHERE id = ? AND state = ?"
        parameters.append(contentsOf: [id, expected.rawValue] as SqlParameters)
        return try tx.execute(sql: sql, parameters: parameters) == 1
    }

    /// Sets columns of a record that is still in `expected`, leaving its state and timestamp alone.
    @discardableResult
    func update(
        id: String,
        ifState expected: AttachmentState,
        set assignments: [(column: String, value: (any SqlValueConvertible)?)],
        in tx: SqlTransaction
    ) throws -> Bool {
        let sets = assignments.map { "\(SqlIdentifier.quote($0.column)) = ?" }.joined(separator: ", ")
        let parameters: SqlParameters = assignments.map(\.value) + [id, expected.rawValue]
        return try tx.execute(sql: "UPDATE \(table) SET \(sets) WHERE id = ? AND state = ?", parameters: parameters)
            == 1
    }

    @discardableResult
    func delete(id: String, ifState expected: AttachmentState, in tx: SqlTransaction) throws -> Bool {
        try tx.execute(sql: "DELETE FROM \(table) WHERE id = ? AND state = ?", parameters: [id, expected.rawValue])
            == 1
    }

    /// The condition of records that are disposable cache: archived, not given up, and not holding the only
    /// copy of their content (a local file that never reached remote storage).
    static let evictableArchived =
        "state = 4 AND given_up IS NULL AND NOT (local_uri IS NOT NULL AND coalesce(has_synced, 0) = 0)"

    /// Archived records beyond the newest `keep`, oldest first: the ones to evict. Records that are not
    /// disposable (see ``evictableArchived``) are neither counted nor returned.
    func archivedBeyond(keep: Int64, in tx: SqlTransaction) throws -> [AttachmentRecord] {
        try tx.getAll(
            sql: """
                SELECT \(AttachmentRecord.columns) FROM \(table) WHERE \(Self.evictableArchived)
                ORDER BY timestamp DESC, id DESC LIMIT -1 OFFSET ?
                """,
            parameters: [keep]
        ) { try AttachmentRecord(cursor: $0) }
        .reversed()
    }

    /// The ids of records (other than `id`) whose remote file is `filename`, or whose local file is `localPath`.
    func owners(ofFilename filename: String?, localPath: String?, except id: String, in tx: SqlTransaction) throws
        -> [String]
    {
        var owners: [String] = []
        if let filename {
            owners += try tx.getAll(
                sql: "SELECT id FROM \(table) WHERE filename = ? AND id <> ? LIMIT 1", parameters: [filename, id]
            ) { try $0.getString(name: "id") }
        }
        if let localPath {
            owners += try tx.getAll(
                sql: "SELECT id FROM \(table) WHERE local_uri = ? AND id <> ? LIMIT 1", parameters: [localPath, id]
            ) { try $0.getString(name: "id") }
        }
        return owners
    }

    /// The records that use one of `filenames` as their remote file, as (filename, id) pairs, read in
    /// batches. (A pair list rather than a dictionary: filenames that differ only in their Unicode form are
    /// distinct in SQLite but one key in a Swift dictionary.)
    func owners(ofFilenames filenames: [String], in tx: SqlTransaction) throws -> [(filename: String, id: String)] {
        var owners: [(filename: String, id: String)] = []
        for start in stride(from: 0, to: filenames.count, by: 500) {
            let batch = filenames[start..<min(start + 500, filenames.count)]
            let placeholders = Array(repeating: "?", count: batch.count).joined(separator: ", ")
            owners += try tx.getAll(
                sql: "SELECT filename, id FROM \(table) WHERE filename IN (\(placeholders))",
                parameters: batch.map { $0 as (any SqlValueConvertible)? },
                mapper: { (filename: try $0.getString(name: "filename"), id: try $0.getString(name: "id")) })
        }
        return owners
    }

    /// The names of the columns the table has, to check it before the queue starts.
    func columnNames(in tx: SqlTransaction) throws -> Set<String> {
        Set(
            try tx.getAll(sql: "SELECT name FROM pragma_table_info(?)", parameters: [unquotedName]) {
                try $0.getString(name: "name").lowercased()
            })
    }

    private var unquotedName: String {
        String(table.dropFirst().dropLast()).replacingOccurrences(of: "\"\"", with: "\"")
    }
}
