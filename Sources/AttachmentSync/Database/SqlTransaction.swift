import GRDB

/// The connection handed to ``LocalDatabase/writeTransaction(_:)`` and ``LocalDatabase/readTransaction(_:)``
/// bodies, and to the update hooks of the attachment queue.
///
/// Everything done through it belongs to one transaction: it commits when the body returns and rolls back
/// when the body throws. Use it only inside the body it was passed to.
///
/// ```swift
/// try await db.writeTransaction { tx in
///     try tx.execute(sql: "INSERT INTO lists (id, name) VALUES (?, ?)", arguments: [listId, "Groceries"])
///     try tx.execute(sql: "UPDATE stats SET lists = lists + 1 WHERE id = ?", arguments: ["totals"])
/// }
/// ```
public struct SqlTransaction {
    let db: Database
    /// Whether statements are kept compiled for the next call with the same SQL (see ``cached``).
    let caching: Bool

    init(_ db: Database, caching: Bool = false) {
        self.db = db
        self.caching = caching
    }

    /// The same transaction, keeping each statement compiled (in the connection's cache) for the next call
    /// with the same SQL: what the queue's own queries use, as they run after every transfer. Only for
    /// single statements, and mappers that run no query of their own (a cached statement is reset when it
    /// is used again, so a nested use of the same SQL would cut the outer iteration short).
    var cached: SqlTransaction { SqlTransaction(db, caching: true) }

    /// Executes one or more SQL statements, binding `arguments` to their `?` placeholders in order.
    ///
    /// - Returns: The number of rows the last `INSERT`, `UPDATE` or `DELETE` changed; `0` for other
    ///   statements.
    /// - Throws: ``LocalDatabaseError`` with code ``LocalDatabaseError/Code-swift.struct/sqlError`` when
    ///   SQLite rejects the statement.
    @discardableResult
    public func execute(sql: String, arguments: SqlParameters) throws -> Int {
        try execute(sql: sql, parameters: arguments)
    }

    /// Executes one or more SQL statements, binding `parameters` to their `?` placeholders in order.
    ///
    /// - Returns: The number of rows the last `INSERT`, `UPDATE` or `DELETE` changed; `0` for other
    ///   statements.
    /// - Throws: ``LocalDatabaseError`` with code ``LocalDatabaseError/Code-swift.struct/sqlError`` when
    ///   SQLite rejects the statement.
    @discardableResult
    public func execute(sql: String, parameters: SqlParameters = []) throws -> Int {
        try LocalDatabaseError.converting(sql: sql) {
            let before = db.totalChangesCount
            if caching {
                try db.cachedStatement(sql: sql).execute(arguments: StatementArguments(parameters))
            } else {
                try db.execute(sql: sql, arguments: StatementArguments(parameters))
            }
            // sqlite3_changes() keeps the count of the last DML statement even when the statement run was
            // DDL or a SELECT; the total count tells whether this call changed anything at all.
            return db.totalChangesCount == before ? 0 : db.changesCount
        }
    }

    /// Runs a query and maps every row.
    public func getAll<T>(
        sql: String,
        parameters: SqlParameters = [],
        mapper: (SqlCursor) throws -> T
    ) throws -> [T] {
        var results: [T] = []
        try forEachRow(sql: sql, parameters: parameters) { cursor in
            results.append(try mapper(cursor))
            return true
        }
        return results
    }

    /// Runs a query and maps its first row, or returns `nil` when it has none.
    public func getOptional<T>(
        sql: String,
        parameters: SqlParameters = [],
        mapper: (SqlCursor) throws -> T
    ) throws -> T? {
        var result: T?
        try forEachRow(sql: sql, parameters: parameters) { cursor in
            result = try mapper(cursor)
            return false
        }
        return result
    }

    /// Runs a query and maps its first row.
    ///
    /// - Throws: ``LocalDatabaseError`` with code ``LocalDatabaseError/Code-swift.struct/noRows`` when the
    ///   query returns no row.
    public func get<T>(
        sql: String,
        parameters: SqlParameters = [],
        mapper: (SqlCursor) throws -> T
    ) throws -> T {
        guard let value = try getOptional(sql: sql, parameters: parameters, mapper: mapper) else {
            throw LocalDatabaseError(code: .noRows, message: "the query returned no row", sql: sql)
        }
        return value
    }
}
