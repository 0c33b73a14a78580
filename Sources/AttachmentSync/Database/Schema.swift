/// The tables a ``LocalDatabase`` holds.
///
/// Applying a schema creates missing tables and indexes and adds missing columns to existing tables. It
/// never drops or rewrites a table, a column or a row, so an app can grow its schema between releases
/// by adding tables and columns.
///
/// ```swift
/// let schema = Schema(tables: [
///     Table(name: "checklists", columns: [.text("description"), .integer("completed"), .text("photo_id")]),
///     createAttachmentTable(name: "attachments"),
/// ])
/// let db = try LocalDatabase(path: databasePath, schema: schema)
/// ```
public struct Schema: Sendable, Hashable {
    /// The tables, in the order they are created.
    public let tables: [Table]

    /// Creates a schema from its tables.
    public init(tables: [Table]) {
        self.tables = tables
    }

    /// The table with the given name (compared case-insensitively, as SQLite does), if the schema has one.
    public func table(named name: String) -> Table? {
        tables.first { $0.name.lowercased() == name.lowercased() }
    }

    /// Checks every table (see ``Table/validate()``) and that no two tables share a name.
    ///
    /// - Throws: ``LocalDatabaseError`` naming the value at fault.
    public func validate() throws {
        var names: Set<String> = []
        var indexNames: Set<String> = []
        for table in tables {
            try table.validate()
            guard names.insert(table.name.lowercased()).inserted else {
                throw LocalDatabaseError(
                    code: .invalidSchema,
                    message: "table \(String(reflecting: table.name)) is declared twice",
                    name: table.name
                )
            }
            for index in table.indexes {
                let sqlName = index.sqlName(table: table.name)
                guard indexNames.insert(sqlName.lowercased()).inserted else {
                    throw LocalDatabaseError(
                        code: .invalidSchema,
                        message: "index \(String(reflecting: index.name)) of table \(String(reflecting: table.name)) "
                            + "would be created as \(String(reflecting: sqlName)), which another index already uses",
                        name: index.name
                    )
                }
            }
        }
    }
}
