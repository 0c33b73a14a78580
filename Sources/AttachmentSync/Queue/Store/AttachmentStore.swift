import Foundation

/// The SQL the queue runs against its attachments table. Every state change is conditional on the state
/// the caller last saw (`WHERE id = ? AND state = ?`), so a stale decision never overwrites a newer one;
/// each method returns whether its row changed.
struct AttachmentStore: Sendable {
    let table: String
    /// The condition that leaves out of the queued reads the attachments handed to a background service
    /// (they are queued, but their transfer runs elsewhere), or `""` when the queue hands none over.
    let notHandedOff: String
    /// The hand-off records' scope (`table`, as an SQL literal) when the queue hands transfers off.
    let handOffScope: String?

    /// A store of `table`; `handsOff` when the queue hands transfers to a background service (the
    /// hand-offs table exists then).
    init(table: String, handsOff: Bool = false) {
        self.table = SqlIdentifier.quote(table)
        handOffScope = handsOff ? SqlIdentifier.quoteLiteral(table) : nil
        notHandedOff =
            handOffScope.map { " AND id NOT IN (SELECT attachment_id FROM \(HandOffStore.table) WHERE scope = \($0))" }
            ?? ""
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

    /// Up to `limit` records whose ids come after `id` (from the first with `nil`), in the order of their
    /// ids: a table read a page at a time, through the id's index.
    func records(after id: String?, limit: Int, in tx: SqlTransaction) throws -> [AttachmentRecord] {
        try tx.cached.getAll(
            sql:
                "SELECT \(AttachmentRecord.columns) FROM \(table) WHERE \(id == nil ? "1" : "id > ?") ORDER BY id LIMIT ?",
            parameters: id.map { [$0, limit] } ?? [limit]
        ) { try AttachmentRecord(cursor: $0) }
    }

    /// Every record, oldest first.
    func records(in tx: SqlTransaction) throws -> [AttachmentRecord] {
        try records(in: tx, where: "1")
    }

    /// The records in `state`, oldest first.
    func records(in state: AttachmentState, in tx: SqlTransaction) throws -> [AttachmentRecord] {
        try records(in: tx, where: "state = ?", parameters: [state.rawValue])
    }

    /// The records of `filename`, oldest first (one, unless rows of the app's tables share a filename).
    func records(filename: String, in tx: SqlTransaction) throws -> [AttachmentRecord] {
        try records(in: tx, where: "filename = ?", parameters: [filename])
    }

    /// The records `retryAll` looks at: given up, or queued and waiting for a retry time.
    func retryCandidates(in tx: SqlTransaction) throws -> [AttachmentRecord] {
        try records(
            in: tx, where: "given_up IS NOT NULL OR (state IN \(StateSet.queuedSQL) AND next_attempt_at IS NOT NULL)")
    }

    /// The records whose local content the cache budget may evict (see ``CachePolicy/classify(_:)`` and
    /// ``cacheClassSQL``).
    func evictable(in tx: SqlTransaction) throws -> [AttachmentRecord] {
        try records(in: tx, where: "(\(Self.cacheClassSQL)) = '\(CachePolicy.Class.evictable.rawValue)'")
    }

    /// The SQL of the watch on one record; parameter: its id.
    var recordByIdSQL: String {
        "SELECT \(AttachmentRecord.columns) FROM \(table) WHERE id = ?"
    }

    /// The records matching `condition`, oldest first. With `caching` (the default) the statement stays
    /// compiled for the next call; a condition whose text varies without bound (an `IN` list of any length)
    /// passes `false`, so the connection's cache does not grow with it.
    private func records(
        in tx: SqlTransaction, where condition: String, parameters: SqlParameters = [], caching: Bool = true
    ) throws -> [AttachmentRecord] {
        try (caching ? tx.cached : tx).getAll(
            sql: "SELECT \(AttachmentRecord.columns) FROM \(table) WHERE \(condition) ORDER BY timestamp, id",
            parameters: parameters
        ) { try AttachmentRecord(cursor: $0) }
    }

    /// What startup needs of every record (or, with `queuedOnly`, of every queued one, read through the
    /// state index): its id, filename, state and local file. A fraction of the cost of whole records, which
    /// matters at 1,000,000.
    func startupEntries(in tx: SqlTransaction, queuedOnly: Bool = false) throws -> [StartupEntry] {
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
            return StartupEntry(
                id: id, filename: try cursor.getStringOptional(name: "filename") ?? id, state: state,
                localPath: try cursor.getStringOptional(name: "local_uri"))
        }
    }

    /// What startup's check of files reads of a record: its id, file name, state and local file. A quarter
    /// of a whole ``AttachmentRecord``'s memory, for a check that reads every record.
    struct StartupEntry: Sendable {
        var id: String
        var filename: String
        var state: AttachmentState
        var localPath: String?

        /// The name of the record's file in the attachments folder (``AttachmentRecord/localName()``).
        func localName() throws -> String {
            try AttachmentRecord.localName(id: id, filename: filename)
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
        set change: RecordChange = .none,
        ifLocalPath localPath: String? = nil,
        in tx: SqlTransaction
    ) throws -> Bool {
        var sql = "UPDATE \(table) SET state = ?, timestamp = ?"
        var parameters: SqlParameters = [newState.rawValue, timestamp]
        for assignment in change.effective {
            sql += ", \(assignment.column.name) = ?"
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
        set change: RecordChange,
        ifLocalPath localPath: String? = nil,
        in tx: SqlTransaction
    ) throws -> Bool {
        let assignments = change.effective
        let sets = assignments.map { "\($0.column.name) = ?" }.joined(separator: ", ")
        var parameters: SqlParameters = assignments.map(\.value) + [id, expected.rawValue]
        var sql = "UPDATE \(table) SET \(sets) WHERE id = ? AND state = ?"
        if let localPath {
            sql += " AND local_uri = ?"
            parameters.append(localPath)
        }
        return try tx.cached.execute(sql: sql, parameters: parameters) == 1
    }

    @discardableResult
    func delete(id: String, ifState expected: AttachmentState, in tx: SqlTransaction) throws -> Bool {
        try tx.cached.execute(
            sql: "DELETE FROM \(table) WHERE id = ? AND state = ?", parameters: [id, expected.rawValue])
            == 1
    }

    func deleteAll(in tx: SqlTransaction) throws {
        _ = try tx.cached.execute(sql: "DELETE FROM \(table)", parameters: [])
    }
}
