/// The SQLite type of a ``Column``.
public enum ColumnType: String, Sendable, Hashable, CaseIterable {
    /// `TEXT`: strings (UUIDs, JSON, ISO dates).
    case text = "TEXT"
    /// `INTEGER`: whole numbers and booleans.
    case integer = "INTEGER"
    /// `REAL`: floating point numbers.
    case real = "REAL"
}

/// A column of a ``Table``.
///
/// Every table also has an implicit `id TEXT PRIMARY KEY NOT NULL` column, so `id` is not declared.
///
/// ```swift
/// let columns: [Column] = [.text("description"), .integer("completed"), .real("latitude")]
/// ```
public struct Column: Sendable, Hashable {
    /// The column's name: a SQL identifier (letters, digits and `_`, not starting with a digit).
    public let name: String
    /// The column's SQLite type.
    public let type: ColumnType

    /// Creates a column with the given name and type.
    public init(name: String, type: ColumnType) {
        self.name = name
        self.type = type
    }

    /// A `TEXT` column.
    public static func text(_ name: String) -> Column { Column(name: name, type: .text) }
    /// An `INTEGER` column.
    public static func integer(_ name: String) -> Column { Column(name: name, type: .integer) }
    /// A `REAL` column.
    public static func real(_ name: String) -> Column { Column(name: name, type: .real) }
}
