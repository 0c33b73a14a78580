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

    /// Throws ``AttachmentError/Code-swift.struct/invalidName`` when `table` cannot name a table.
    static func validateTableName(_ table: String) throws {
        do {
            try SqlIdentifier.validate(table, kind: "table")
        } catch {
            throw AttachmentError(
                code: .invalidName, message: "\(String(reflecting: table)) cannot name a table: \(error)", name: table)
        }
    }

    /// Every record of the table `table` in `db`, in one read transaction, for the tools that inspect a
    /// database the queue is not running on.
    static func allRecords(of db: LocalDatabase, table: String) async throws -> [AttachmentRecord] {
        try validateTableName(table)
        let store = AttachmentStore(table: table)
        return try await db.readTransaction { tx in
            try store.checkTable(in: tx)
            return try store.records(in: tx)
        }
    }

    func record(id: String, in tx: SqlTransaction) throws -> AttachmentRecord? {
        try tx.cached.getOptional(
            sql: "SELECT \(AttachmentRecord.columns) FROM \(table) WHERE id = ?", parameters: [id]
        ) {
            try AttachmentRecord(cursor: $0)
        }
    }

    /// The records matching `condition`, oldest first. With `caching` (the default) the statement stays
    /// compiled for the next call; a condition whose text varies without bound (an `IN` list of any length)
    /// passes `false`, so the connection's cache does not grow with it.
    func records(
        in tx: SqlTransaction, where condition: String = "1", parameters: SqlParameters = [], caching: Bool = true
    ) throws -> [AttachmentRecord] {
        try (caching ? tx.cached : tx).getAll(
            sql: "SELECT \(AttachmentRecord.columns) FROM \(table) WHERE \(condition) ORDER BY timestamp, id",
            parameters: parameters
        ) { try AttachmentRecord(cursor: $0) }
    }

    /// What startup needs of every record (or, with `queuedOnly`, of every queued one, read through the
    /// state index): records holding only their id, filename, state and local file (the other fields are
    /// left empty). A fraction of the cost of whole records, which matters at 100,000.
    func startupEntries(in tx: SqlTransaction, queuedOnly: Bool = false) throws -> [AttachmentRecord] {
        let condition = queuedOnly ? " WHERE state IN \(StateSet.queuedSQL)" : ""
        return try tx.getAll(sql: "SELECT id, filename, state, local_uri FROM \(table)\(condition)") {
            cursor in
            let id = try cursor.getString(name: "id")
            let rawState = try cursor.getInt(name: "state")
            guard let state = AttachmentState(rawValue: rawState) else {
                throw LocalDatabaseError(
                    code: .typeMismatch, message: "attachment \(String(reflecting: id)) has unknown state \(rawState)",
                    name: "state")
            }
            return AttachmentRecord(
                id: id, filename: try cursor.getStringOptional(name: "filename") ?? id, state: state, timestamp: 0,
                localPath: try cursor.getStringOptional(name: "local_uri"))
        }
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
                in: tx, where: "id IN (\(placeholders))", parameters: batch.map { $0 as (any SqlValueConvertible)? },
                caching: false)
        }
        return records.sorted { ($0.timestamp, $0.id) < ($1.timestamp, $1.id) }
    }

    /// Records waiting for a transfer whose retry time (if any) has come by `now` (milliseconds since
    /// 1970), by priority: uploads and deletes (this device's changes) before downloads, each oldest first;
    /// at most `limit` of each.
    ///
    /// One query per state, each an ordered walk of the (`state`, `timestamp`) index that stops after
    /// `limit` rows, so a read costs the same with 100 or 100,000 records queued. (One query over
    /// `state IN (…)` cannot walk the index in order: SQLite reads every queued record and sorts them.)
    func queued(limit: Int, readyAt now: Int64, in tx: SqlTransaction) throws -> [AttachmentRecord] {
        let changes = try queued(in: .queuedUpload, limit: limit, readyAt: now, in: tx)
            .merged(with: try queued(in: .queuedDelete, limit: limit, readyAt: now, in: tx))
        return Array(changes.prefix(limit)) + (try queued(in: .queuedDownload, limit: limit, readyAt: now, in: tx))
    }

    private func queued(in state: AttachmentState, limit: Int, readyAt now: Int64, in tx: SqlTransaction) throws
        -> [AttachmentRecord]
    {
        try tx.cached.getAll(sql: queuedSQL, parameters: [state.rawValue, now, limit]) {
            try AttachmentRecord(cursor: $0)
        }
    }

    /// The read of one queued state's due records, oldest first; parameters: the state, now, the limit.
    /// The retry time is tested through `coalesce` so that no index on it applies: with one, SQLite may
    /// collect every due record of the state through the (`state`, `next_attempt_at`) index and sort them,
    /// where walking (`state`, `timestamp`) in order stops at the limit.
    var queuedSQL: String {
        """
        SELECT \(AttachmentRecord.columns) FROM \(table)
        WHERE state = ? AND coalesce(next_attempt_at, 0) <= ?
        ORDER BY timestamp, id LIMIT ?
        """
    }

    /// The queued records among `ids` (whatever their retry time: an app raised them).
    func queued(ids: [String], in tx: SqlTransaction) throws -> [AttachmentRecord] {
        guard !ids.isEmpty else { return [] }
        let marks = Array(repeating: "?", count: ids.count).joined(separator: ", ")
        return try tx.getAll(
            sql: "SELECT \(AttachmentRecord.columns) FROM \(table) WHERE state IN \(StateSet.queuedSQL) "
                + "AND id IN (\(marks)) ORDER BY timestamp, id",
            parameters: ids.map { $0 as (any SqlValueConvertible)? }
        ) { try AttachmentRecord(cursor: $0) }
    }

    /// Lets queued records whose last tries failed for the network run at once, their backoff started over
    /// (those failures spent no attempt). Returns how many there were.
    func resetConnectivityFailures(in tx: SqlTransaction) throws -> Int {
        try tx.cached.execute(
            sql: "UPDATE \(table) SET next_attempt_at = NULL, connectivity_failure = NULL "
                + "WHERE connectivity_failure IS NOT NULL AND state IN \(StateSet.queuedSQL)",
            arguments: [])
    }

    /// Lets queued records whose last tries could not reach the local files run at once, their backoff
    /// started over: the files are in reach again. Returns how many there were.
    func resetLocalUnavailable(in tx: SqlTransaction) throws -> Int {
        try tx.cached.execute(
            sql: "UPDATE \(table) SET next_attempt_at = NULL, local_unavailable = NULL "
                + "WHERE local_unavailable IS NOT NULL AND state IN \(StateSet.queuedSQL)",
            arguments: [])
    }

    /// The soonest retry time after `now` among queued records, if any: per state, the first entry after
    /// `now` in the (`state`, `next_attempt_at`) index.
    func earliestRetry(after now: Int64, in tx: SqlTransaction) throws -> Int64? {
        try StateSet.queued.compactMap { state in
            try tx.cached.get(sql: earliestRetrySQL, parameters: [state.rawValue, now]) {
                try $0.getInt64Optional(name: "soonest")
            }
        }.min()
    }

    /// The soonest retry time of one queued state after a time; parameters: the state, the time.
    var earliestRetrySQL: String {
        "SELECT min(next_attempt_at) AS soonest FROM \(table) WHERE state = ? AND next_attempt_at > ?"
    }

    /// A query whose result changes whenever a record enters a queued state, for the sync trigger's watch:
    /// the newest `timestamp` of each queued state. Every write of the queue that puts a record in a queued
    /// state gives it a timestamp later than any it gave before, so that state's newest timestamp moves.
    /// Each is one look-up in the (`state`, `timestamp`) index, however long the queue: the watch runs
    /// again after every commit to the table, a finished transfer's included. (Records leaving a queued
    /// state need no signal: the queue finishes those transfers itself, and a record leaving otherwise
    /// frees no slot.)
    var queuedSignalSQL: String {
        "SELECT "
            + StateSet.queued.map {
                "(SELECT max(timestamp) FROM \(table) WHERE state = \($0.rawValue)) AS latest\($0.rawValue)"
            }.joined(separator: ", ")
    }

    /// A record's size as sums count it: an integer of at least 0, else `NULL`. A size of another storage
    /// class (text, real, blob) or a negative one is not a byte count: sums leave it out, and the status
    /// counts it as invalid. Sums are `total()` (floating point, which no row count or size overflows: exact
    /// up to 2^53 bytes, 8 PiB) cast back to an integer, which SQLite saturates at `Int64.max`.
    static let countedSizeSQL = "(CASE WHEN typeof(size) = 'integer' AND size >= 0 THEN size END)"

    /// Whether a record's size is there but not a byte count (see ``countedSizeSQL``).
    static let invalidSizeSQL = "(size IS NOT NULL AND \(countedSizeSQL) IS NULL)"

    /// The status snapshot's query, one row per kind: 0 totals by state (the records of unknown size in
    /// `attempts`, of an invalid size in `next`), 1 a transfer waiting for its retry, 2 a given-up transfer,
    /// 3 the content never uploaded, 4 local bytes by ``CachePolicy/Class`` (its name in `id`).
    /// `QueueStatus` reads the rows. Every sum counts valid sizes only (``countedSizeSQL``) and saturates.
    var statusSQL: String {
        let size = Self.countedSizeSQL
        return """
            SELECT 0 AS kind, state, count(*) AS n, CAST(total(\(size)) AS INTEGER) AS bytes,
                   CAST(total(CASE WHEN local_uri IS NOT NULL THEN \(size) END) AS INTEGER) AS local,
                   NULL AS id, count(*) - count(size) AS attempts, count(size) - count(\(size)) AS next, NULL AS err,
                   NULL AS net, NULL AS lfs
            FROM \(table) GROUP BY state
            UNION ALL
            SELECT 1, state, NULL, NULL, coalesce(awaiting_upload, 0), id, attempts, next_attempt_at, last_error,
                   connectivity_failure, local_unavailable
            FROM \(table) WHERE next_attempt_at IS NOT NULL AND state IN \(StateSet.queuedSQL)
            UNION ALL
            SELECT 2, given_up, NULL, NULL, 0, id, attempts,
                   CASE WHEN local_uri IS NOT NULL AND coalesce(has_synced, 0) = 0 THEN 1 ELSE 0 END, last_error, NULL, NULL
            FROM \(table) WHERE given_up IS NOT NULL AND state = \(AttachmentState.archived.rawValue)
            UNION ALL
            SELECT 3, \(AttachmentState.queuedUpload.rawValue), count(*), CAST(total(\(size)) AS INTEGER), 0, NULL, NULL, NULL, NULL, NULL, NULL
            FROM \(table) WHERE local_uri IS NOT NULL AND coalesce(has_synced, 0) = 0 AND state IN \(StateSet.sql([.queuedUpload, .archived]))
            UNION ALL
            SELECT 4, 0, count(*), CAST(total(\(size)) AS INTEGER), 0, class, NULL, NULL, NULL, NULL, NULL
            FROM (SELECT size, \(CachePolicy.classSQL) AS class FROM \(table) WHERE local_uri IS NOT NULL) GROUP BY class
            """
    }

    // MARK: Writes

    func insert(_ record: AttachmentRecord, in tx: SqlTransaction) throws {
        try tx.cached.execute(
            sql: """
                INSERT INTO \(table) (\(AttachmentColumn.selectList))
                VALUES (\(Array(repeating: "?", count: AttachmentColumn.allCases.count + 1).joined(separator: ", ")))
                """,
            parameters: [record.id] + AttachmentColumn.allCases.map { record.value(of: $0) }
        )
    }

    /// Lets every download that waits for another device's upload run at the next pass: clears its retry
    /// time and returns the ids.
    func bringForwardAwaitingUploads(in tx: SqlTransaction) throws -> [String] {
        let condition =
            "state = \(AttachmentState.queuedDownload.rawValue) AND awaiting_upload IS NOT NULL "
            + "AND next_attempt_at IS NOT NULL"
        let ids = try tx.cached.getAll(sql: "SELECT id FROM \(table) WHERE \(condition)", parameters: []) {
            try $0.getString(name: "id")
        }
        guard !ids.isEmpty else { return [] }
        try tx.cached.execute(sql: "UPDATE \(table) SET next_attempt_at = NULL WHERE \(condition)", parameters: [])
        return ids
    }

    /// Moves a record from `expected` to `newState`, setting the given extra columns.
    @discardableResult
    func transition(
        id: String,
        from expected: AttachmentState,
        to newState: AttachmentState,
        timestamp: Int64,
        set assignments: [(column: String, value: (any SqlValueConvertible)?)] = [],
        ifLocalPath localPath: String? = nil,
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
        if let localPath {
            sql += " AND local_uri = ?"
            parameters.append(localPath)
        }
        return try tx.cached.execute(sql: sql, parameters: parameters) == 1
    }

    /// Sets columns of a record that is still in `expected` (and, when `localPath` is given, still refers
    /// to that local file), leaving its state and timestamp alone.
    @discardableResult
    func update(
        id: String,
        ifState expected: AttachmentState,
        set assignments: [(column: String, value: (any SqlValueConvertible)?)],
        ifLocalPath localPath: String? = nil,
        in tx: SqlTransaction
    ) throws -> Bool {
        let sets = assignments.map { "\(SqlIdentifier.quote($0.column)) = ?" }.joined(separator: ", ")
        var parameters: SqlParameters = assignments.map(\.value) + [id, expected.rawValue]
        var sql = "UPDATE \(table) SET \(sets) WHERE id = ? AND state = ?"
        if let localPath {
            sql += " AND local_uri = ?"
            parameters.append(localPath)
        }
        return try tx.cached.execute(sql: sql, parameters: parameters) == 1
    }

    /// Which of `localPaths` some record refers to (read in batches, to stay under SQLite's limit on
    /// query parameters).
    func referenced(localPaths: Set<String>, in tx: SqlTransaction) throws -> Set<String> {
        var found: Set<String> = []
        let paths = Array(localPaths)
        for start in stride(from: 0, to: paths.count, by: 500) {
            let batch = paths[start..<min(start + 500, paths.count)]
            let marks = Array(repeating: "?", count: batch.count).joined(separator: ", ")
            let rows = try tx.getAll(
                sql: "SELECT local_uri FROM \(table) WHERE local_uri IN (\(marks))",
                parameters: batch.map { $0 as (any SqlValueConvertible)? }
            ) { try $0.getString(name: "local_uri") }
            found.formUnion(rows)
        }
        return found
    }

    @discardableResult
    func delete(id: String, ifState expected: AttachmentState, in tx: SqlTransaction) throws -> Bool {
        try tx.cached.execute(
            sql: "DELETE FROM \(table) WHERE id = ? AND state = ?", parameters: [id, expected.rawValue])
            == 1
    }

    /// The condition of records that are disposable cache: archived, not given up, and not holding the only
    /// copy of their content (a local file that never reached remote storage).
    static let evictableArchived =
        "state = \(AttachmentState.archived.rawValue) AND given_up IS NULL "
        + "AND NOT (local_uri IS NOT NULL AND coalesce(has_synced, 0) = 0)"

    /// Archived records beyond the newest `keep`, oldest first: the ones to evict. Records that are not
    /// disposable (see ``evictableArchived``) are neither counted nor returned.
    func archivedBeyond(keep: Int64, in tx: SqlTransaction) throws -> [AttachmentRecord] {
        try tx.cached.getAll(
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
            owners += try tx.cached.getAll(
                sql: "SELECT id FROM \(table) WHERE filename = ? AND id <> ? LIMIT 1", parameters: [filename, id]
            ) { try $0.getString(name: "id") }
        }
        if let localPath {
            owners += try tx.cached.getAll(
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

    /// Marks the content as used at `now` (milliseconds since 1970), for least-recently-used eviction.
    func touch(id: String, at now: Int64, in tx: SqlTransaction) throws {
        _ = try tx.cached.execute(sql: "UPDATE \(table) SET last_used_at = ? WHERE id = ?", parameters: [now, id])
    }

    /// Pins or unpins a record; `false` when there is none.
    func setPinned(_ pinned: Bool, id: String, in tx: SqlTransaction) throws -> Bool {
        try tx.cached.execute(sql: "UPDATE \(table) SET pinned = ? WHERE id = ?", parameters: [pinned, id]) == 1
    }

    /// Records a hash and size the app's row carries, where the record knows none yet and has no content.
    func learn(contentHash: String?, size: Int64?, id: String, in tx: SqlTransaction) throws {
        _ = try tx.cached.execute(
            sql: "UPDATE \(table) SET content_hash = coalesce(content_hash, ?), size = coalesce(size, ?) "
                + "WHERE id = ? AND local_uri IS NULL AND state IN \(StateSet.sql([.queuedDownload, .synced]))",
            parameters: [contentHash, size, id])
    }

    /// The bytes of content on the device.
    func localContentBytes(in tx: SqlTransaction) throws -> Int64 {
        try tx.cached.get(
            sql:
                "SELECT CAST(total(\(Self.countedSizeSQL)) AS INTEGER) AS bytes FROM \(table) WHERE local_uri IS NOT NULL"
        ) {
            try $0.getInt64Optional(name: "bytes")
        } ?? 0
    }

    /// An archived, disposable record lets go of its file `localPath`; `false` when it changed meanwhile.
    func releaseArchivedContent(id: String, localPath: String, in tx: SqlTransaction) throws -> Bool {
        try tx.cached.execute(
            sql: "UPDATE \(table) SET local_uri = NULL WHERE id = ? AND local_uri = ? AND \(Self.evictableArchived)",
            parameters: [id, localPath]) == 1
    }

    /// Deletes an archived, disposable record that holds no file; `false` when it changed meanwhile.
    func deleteReleasedArchived(id: String, in tx: SqlTransaction) throws -> Bool {
        try tx.cached.execute(
            sql: "DELETE FROM \(table) WHERE id = ? AND local_uri IS NULL AND \(Self.evictableArchived)",
            parameters: [id]) == 1
    }

    /// A record still in `state` whose content reached remote storage lets go of its file `localPath`;
    /// `false` when it changed meanwhile (or its content was never uploaded).
    func releaseUploadedContent(id: String, ifState state: AttachmentState, localPath: String, in tx: SqlTransaction)
        throws -> Bool
    {
        try tx.cached.execute(
            sql: "UPDATE \(table) SET local_uri = NULL "
                + "WHERE id = ? AND state = ? AND local_uri = ? AND coalesce(has_synced, 0) = 1",
            parameters: [id, state.rawValue, localPath]) == 1
    }

    /// Archives every record and lets it go of its file (the first step of `clearQueue`).
    func archiveAllReleasingContent(in tx: SqlTransaction) throws {
        _ = try tx.cached.execute(
            sql: "UPDATE \(table) SET state = ?, local_uri = NULL, given_up = NULL",
            parameters: [AttachmentState.archived.rawValue])
    }

    func deleteAll(in tx: SqlTransaction) throws {
        _ = try tx.cached.execute(sql: "DELETE FROM \(table)", parameters: [])
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

    /// The `limit` records with the most bytes, largest first.
    func largest(limit: Int, in tx: SqlTransaction) throws -> [AttachmentRecord] {
        try tx.cached.getAll(
            sql:
                "SELECT \(AttachmentRecord.columns) FROM \(table) WHERE \(Self.countedSizeSQL) IS NOT NULL "
                + "ORDER BY size DESC, id LIMIT ?",
            parameters: [limit]
        ) { try AttachmentRecord(cursor: $0) }
    }

    /// Up to `limit` records whose size is not a byte count (``invalidSizeSQL``), by id: their id, state
    /// (`nil` when it is not one) and size as stored.
    func invalidSizes(limit: Int, in tx: SqlTransaction) throws -> [(
        id: String, state: AttachmentState?, size: SqlValue
    )] {
        try tx.cached.getAll(
            sql: "SELECT id, state, size FROM \(table) WHERE \(Self.invalidSizeSQL) ORDER BY id LIMIT ?",
            parameters: [limit]
        ) { cursor in
            var state: AttachmentState?
            if case .integer(let raw) = try cursor.getValue(name: "state") {
                state = Int(exactly: raw).flatMap(AttachmentState.init(rawValue:))
            }
            let id = try cursor.getValue(name: "id")
            if case .text(let text) = id { return (id: text, state: state, size: try cursor.getValue(name: "size")) }
            return (id: id.description, state: state, size: try cursor.getValue(name: "size"))
        }
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
}

extension Array where Element == AttachmentRecord {
    /// Both arrays' records, oldest first (each must be sorted by `timestamp`, then `id`).
    func merged(with other: [AttachmentRecord]) -> [AttachmentRecord] {
        var merged: [AttachmentRecord] = []
        merged.reserveCapacity(count + other.count)
        var (i, j) = (startIndex, other.startIndex)
        while i < endIndex, j < other.endIndex {
            if (other[j].timestamp, other[j].id) < (self[i].timestamp, self[i].id) {
                merged.append(other[j])
                j += 1
            } else {
                merged.append(self[i])
                i += 1
            }
        }
        return merged + self[i...] + other[j...]
    }
}
