/// A table of a ``Schema``: its name, columns and indexes.
///
/// Each table has an implicit `id TEXT PRIMARY KEY NOT NULL` column besides the declared ones.
/// Names are checked when the schema is applied (``LocalDatabase`` throws
/// ``LocalDatabaseError/Code-swift.struct/invalidIdentifier`` naming the bad one), and always quoted in SQL.
///
/// ```swift
/// let checklists = Table(
///     name: "checklists",
///     columns: [.text("description"), .integer("completed"), .text("photo_id")]
/// )
/// ```
public struct Table: Sendable, Hashable {
    /// The table's name: a SQL identifier.
    public let name: String
    /// The declared columns, without the implicit `id`.
    public let columns: [Column]
    /// The table's indexes. The default is none.
    public let indexes: [Index]
    /// Whether the table holds device-local data that a row-sync layer should not upload (the attachments
    /// table is one). It does not change how the table is created. The default is `false`.
    public let localOnly: Bool

    /// Creates a table definition.
    public init(name: String, columns: [Column], indexes: [Index] = [], localOnly: Bool = false) {
        self.name = name
        self.columns = columns
        self.indexes = indexes
        self.localOnly = localOnly
    }

    /// Checks the table's names: valid identifiers, no duplicates, no declared `id`, indexes over known
    /// columns.
    ///
    /// - Throws: ``LocalDatabaseError`` with code ``LocalDatabaseError/Code-swift.struct/invalidIdentifier``
    ///   or ``LocalDatabaseError/Code-swift.struct/invalidSchema`` naming the value at fault.
    public func validate() throws {
        try SqlIdentifier.validate(name, kind: "table")
        var seen: Set<String> = ["id"]
        for column in columns {
            try SqlIdentifier.validate(column.name, kind: "column")
            guard seen.insert(column.name.lowercased()).inserted else {
                let reason =
                    column.name.lowercased() == "id"
                    ? "is implicit in every table and must not be declared"
                    : "is declared twice"
                throw LocalDatabaseError(
                    code: .invalidSchema,
                    message: "column \(String(reflecting: column.name)) of table \(String(reflecting: name)) \(reason)",
                    name: column.name
                )
            }
        }
        var indexNames: Set<String> = []
        for index in indexes {
            try SqlIdentifier.validate(index.name, kind: "index")
            try SqlIdentifier.validate(index.sqlName(table: name), kind: "index")
            guard indexNames.insert(index.name.lowercased()).inserted else {
                throw LocalDatabaseError(
                    code: .invalidSchema,
                    message:
                        "index \(String(reflecting: index.name)) of table \(String(reflecting: name)) is declared twice",
                    name: index.name
                )
            }
            guard !index.columns.isEmpty else {
                throw LocalDatabaseError(
                    code: .invalidSchema,
                    message:
                        "index \(String(reflecting: index.name)) of table \(String(reflecting: name)) has no columns",
                    name: index.name
                )
            }
            for indexed in index.columns where !seen.contains(indexed.column.lowercased()) {
                throw LocalDatabaseError(
                    code: .invalidSchema,
                    message: "index \(String(reflecting: index.name)) refers to \(String(reflecting: indexed.column)), "
                        + "which is not a column of table \(String(reflecting: name))",
                    name: indexed.column
                )
            }
        }
    }
}
