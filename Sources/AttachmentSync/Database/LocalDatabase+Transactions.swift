import GRDB

extension LocalDatabase {
    // MARK: - Statements

    /// Executes one or more SQL statements in their own transaction.
    ///
    /// - Returns: The number of rows the last `INSERT`, `UPDATE` or `DELETE` changed; `0` for other
    ///   statements.
    /// - Throws: ``LocalDatabaseError`` with code ``LocalDatabaseError/Code-swift.struct/sqlError`` when
    ///   SQLite rejects the statement, ``LocalDatabaseError/Code-swift.struct/closed`` after `close()`.
    @discardableResult
    public func execute(sql: String, parameters: SqlParameters = []) async throws -> Int {
        try await writeTransaction { tx in try tx.execute(sql: sql, parameters: parameters) }
    }

    /// Runs a query and maps every row with `mapper`.
    ///
    /// ```swift
    /// let names = try await db.getAll(sql: "SELECT name FROM lists ORDER BY name") { cursor in
    ///     try cursor.getString(name: "name")
    /// }
    /// ```
    public func getAll<T: Sendable>(
        sql: String,
        parameters: SqlParameters = [],
        mapper: @escaping @Sendable (SqlCursor) throws -> T
    ) async throws -> [T] {
        try await readTransaction { tx in try tx.getAll(sql: sql, parameters: parameters, mapper: mapper) }
    }

    /// Runs a query and maps its first row.
    ///
    /// - Throws: ``LocalDatabaseError`` with code ``LocalDatabaseError/Code-swift.struct/noRows`` when the
    ///   query returns no row.
    public func get<T: Sendable>(
        sql: String,
        parameters: SqlParameters = [],
        mapper: @escaping @Sendable (SqlCursor) throws -> T
    ) async throws -> T {
        try await readTransaction { tx in try tx.get(sql: sql, parameters: parameters, mapper: mapper) }
    }

    /// Runs a query and maps its first row, or returns `nil` when it has none.
    public func getOptional<T: Sendable>(
        sql: String,
        parameters: SqlParameters = [],
        mapper: @escaping @Sendable (SqlCursor) throws -> T
    ) async throws -> T? {
        try await readTransaction { tx in try tx.getOptional(sql: sql, parameters: parameters, mapper: mapper) }
    }

    // MARK: - Transactions

    /// Runs `body` in a write transaction: it commits when `body` returns and rolls back every change when
    /// `body` throws (the error is rethrown as it was thrown).
    ///
    /// Writes are serialized; reads and watches go on meanwhile and see the changes once committed.
    @discardableResult
    public func writeTransaction<Result: Sendable>(
        _ body: @escaping @Sendable (SqlTransaction) throws -> Result
    ) async throws -> Result {
        try await accessing { try await writer.write { db in try body(SqlTransaction(db)) } }
    }

    /// Runs `body` in a write transaction whose commit is on stable storage when this returns, whatever the
    /// connection's `synchronous` setting (GRDB's WAL default, `NORMAL`, may lose the last commits on a power
    /// loss). The queue uses it before it destroys something the commit makes redundant: the app's own file
    /// after `saveFile(fileURL:…moveFile: true)`, the local copy after `deleteFile`.
    ///
    /// `synchronous = FULL` has SQLite flush the WAL at the commit. On Apple platforms that flush is an
    /// `fsync`, which leaves the commit in the drive's volatile cache, unordered with later writes, unless
    /// `PRAGMA fullfsync` is on: SQLite then uses `F_FULLFSYNC` (the pragma does nothing on other systems,
    /// whose `fsync` reaches stable storage). Both are set for this commit only and restored afterwards.
    /// Apple's own build of SQLite (the one GRDB links there) is reported to carry `fullfsync` out with
    /// `F_BARRIERFSYNC`, which orders the commit before every later write to the drive but does not wait for
    /// it; so the drive holding the database is drained once more after the commit
    /// (``SystemFileOperations/drainDrive(holding:)``, `F_FULLFSYNC`; nothing on Linux).
    @discardableResult
    func durableWriteTransaction<Result: Sendable>(
        _ body: @escaping @Sendable (SqlTransaction) throws -> Result
    ) async throws -> Result {
        let result: Result = try await accessing {
            try await writer.writeWithoutTransaction { db in
                // 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA: FULL flushes the WAL at each commit.
                let mode = try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? 2
                let fullFlush = try Bool.fetchOne(db, sql: "PRAGMA fullfsync") ?? false
                if mode < 2 { try db.execute(sql: "PRAGMA synchronous = FULL") }
                if !fullFlush { try db.execute(sql: "PRAGMA fullfsync = ON") }
                defer {
                    if mode < 2 { try? db.execute(sql: "PRAGMA synchronous = \(mode)") }
                    if !fullFlush { try? db.execute(sql: "PRAGMA fullfsync = OFF") }
                }
                var result: Result?
                try db.inTransaction(.immediate) {
                    result = try body(SqlTransaction(db))
                    return .commit
                }
                guard let result else { throw CancellationError() }
                return result
            }
        }
        if let file = databaseFile { SystemFileOperations().drainDrive(holding: file) }
        return result
    }

    /// The database file, for a file database (opened here or adopted); `nil` in memory.
    private var databaseFile: String? {
        let file = path ?? (writer as? DatabasePool)?.path ?? (writer as? DatabaseQueue)?.path
        guard let file, !file.isEmpty, file != ":memory:" else { return nil }
        return file
    }

    /// Runs `body` in a read-only transaction that sees one consistent snapshot of the database.
    ///
    /// Writing through the transaction fails with ``LocalDatabaseError/Code-swift.struct/sqlError``.
    @discardableResult
    public func readTransaction<Result: Sendable>(
        _ body: @escaping @Sendable (SqlTransaction) throws -> Result
    ) async throws -> Result {
        try await accessing { try await writer.read { db in try body(SqlTransaction(db)) } }
    }

    /// Runs `access` (one read or write of ``writer``) unless the database is closed, turning the GRDB errors
    /// it throws into ``LocalDatabaseError``; an error thrown by a caller's closure passes unchanged.
    private func accessing<T>(_ access: () async throws -> T) async throws -> T {
        try ensureOpen()
        do {
            return try await access()
        } catch {
            throw LocalDatabaseError.wrapping(error)
        }
    }
}
