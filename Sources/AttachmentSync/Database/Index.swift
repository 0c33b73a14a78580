/// One column of an ``Index`` with its sort order.
public struct IndexedColumn: Sendable, Hashable {
    /// The indexed column's name (`id` or one of the table's columns).
    public let column: String
    /// Whether the index sorts this column in ascending order. The default is `true`.
    public let ascending: Bool

    /// Creates an indexed column.
    public init(column: String, ascending: Bool = true) {
        self.column = column
        self.ascending = ascending
    }

    /// The column, sorted in ascending order.
    public static func ascending(_ column: String) -> IndexedColumn { IndexedColumn(column: column) }
    /// The column, sorted in descending order.
    public static func descending(_ column: String) -> IndexedColumn {
        IndexedColumn(column: column, ascending: false)
    }
}

/// An index of a ``Table``.
///
/// The index is created in SQLite as `<table>__<name>`, so two tables may use the same index name.
///
/// ```swift
/// let todos = Table(
///     name: "todos",
///     columns: [.text("list_id"), .text("description")],
///     indexes: [.ascending(name: "list", columns: ["list_id"])]
/// )
/// ```
public struct Index: Sendable, Hashable {
    /// The index's name, unique within its table: a SQL identifier.
    public let name: String
    /// The indexed columns, in order.
    public let columns: [IndexedColumn]

    /// Creates an index over the given columns.
    public init(name: String, columns: [IndexedColumn]) {
        self.name = name
        self.columns = columns
    }

    /// An index over the given columns, each in ascending order.
    public static func ascending(name: String, columns: [String]) -> Index {
        Index(name: name, columns: columns.map(IndexedColumn.ascending))
    }

    /// The name of the index in SQLite.
    func sqlName(table: String) -> String { "\(table)__\(name)" }
}
