/// A query to watch with ``LocalDatabase/watch(options:)``: its SQL, its parameters and how to map a row.
///
/// ```swift
/// let photoIds = try db.watch(
///     options: WatchOptions(
///         sql: "SELECT photo_id FROM checklists WHERE photo_id IS NOT NULL",
///         parameters: [],
///         mapper: { cursor in try cursor.getString(name: "photo_id") }
///     )
/// )
/// for try await ids in photoIds { print(ids) }
/// ```
public struct WatchOptions<RowType: Sendable>: Sendable {
    /// The `SELECT` statement.
    public var sql: String
    /// The values bound to the statement's `?` placeholders. The default is none.
    public var parameters: SqlParameters
    /// Maps one row of the result. It runs off the caller's task, on the database's observation queue.
    public var mapper: @Sendable (SqlCursor) throws -> RowType

    /// Creates watch options.
    public init(
        sql: String,
        parameters: SqlParameters = [],
        mapper: @escaping @Sendable (SqlCursor) throws -> RowType
    ) {
        self.sql = sql
        self.parameters = parameters
        self.mapper = mapper
    }
}
