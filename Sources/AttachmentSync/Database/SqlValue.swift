import Foundation
import GRDB

/// One SQLite value: what a statement parameter binds and what a result column holds.
///
/// SQLite stores every value as one of these five storage classes. Booleans are stored as the integers
/// `0` and `1`.
public enum SqlValue: Sendable, Hashable, CustomStringConvertible {
    /// SQL `NULL`.
    case null
    /// A 64-bit signed integer.
    case integer(Int64)
    /// A 64-bit floating point number.
    case real(Double)
    /// UTF-8 text.
    case text(String)
    /// Raw bytes.
    case blob(Data)

    /// The SQLite name of the storage class: `NULL`, `INTEGER`, `REAL`, `TEXT` or `BLOB`.
    public var storageClass: String {
        switch self {
        case .null: "NULL"
        case .integer: "INTEGER"
        case .real: "REAL"
        case .text: "TEXT"
        case .blob: "BLOB"
        }
    }

    /// A readable description, for logs and test failures.
    public var description: String {
        switch self {
        case .null: "NULL"
        case .integer(let value): String(value)
        case .real(let value): String(value)
        case .text(let value): String(reflecting: value)
        case .blob(let value): "<\(value.count) bytes>"
        }
    }
}

/// A Swift value that can be bound as a statement parameter.
///
/// `String`, `Int`, `Int32`, `Int64`, `Double`, `Bool`, `Data`, ``SqlValue`` and optionals of them
/// conform, so parameter lists are written as array literals, with `nil` for `NULL`:
///
/// ```swift
/// try await db.execute(
///     sql: "UPDATE checklists SET photo_id = ?, completed = ? WHERE id = ?",
///     parameters: [photoId, true, checklistId]
/// )
/// ```
///
/// A value of any other type is rejected by the compiler rather than failing at run time.
public protocol SqlValueConvertible: Sendable {
    /// The SQLite value bound for this Swift value.
    var sqlValue: SqlValue { get }
}

/// Statement parameters, bound in order to the statement's `?` placeholders.
public typealias SqlParameters = [(any SqlValueConvertible)?]

extension SqlValue: SqlValueConvertible {
    /// The SQLite value bound for this value.
    public var sqlValue: SqlValue { self }
}

extension String: SqlValueConvertible {
    /// The SQLite value bound for this value.
    public var sqlValue: SqlValue { .text(self) }
}

extension Int: SqlValueConvertible {
    /// The SQLite value bound for this value.
    public var sqlValue: SqlValue { .integer(Int64(self)) }
}

extension Int32: SqlValueConvertible {
    /// The SQLite value bound for this value.
    public var sqlValue: SqlValue { .integer(Int64(self)) }
}

extension Int64: SqlValueConvertible {
    /// The SQLite value bound for this value.
    public var sqlValue: SqlValue { .integer(self) }
}

extension Double: SqlValueConvertible {
    /// The SQLite value bound for this value.
    public var sqlValue: SqlValue { .real(self) }
}

extension Bool: SqlValueConvertible {
    /// The SQLite value bound for this value.
    public var sqlValue: SqlValue { .integer(self ? 1 : 0) }
}

extension Data: SqlValueConvertible {
    /// The SQLite value bound for this value.
    public var sqlValue: SqlValue { .blob(self) }
}

extension Optional: SqlValueConvertible where Wrapped: SqlValueConvertible {
    /// The SQLite value bound for this value.
    public var sqlValue: SqlValue { self?.sqlValue ?? .null }
}

// MARK: - Bridging to GRDB

extension SqlValue {
    init(_ databaseValue: DatabaseValue) {
        switch databaseValue.storage {
        case .null: self = .null
        case .int64(let value): self = .integer(value)
        case .double(let value): self = .real(value)
        case .string(let value): self = .text(value)
        case .blob(let value): self = .blob(value)
        }
    }

    var databaseValue: DatabaseValue {
        switch self {
        case .null: .null
        case .integer(let value): value.databaseValue
        case .real(let value): value.databaseValue
        case .text(let value): value.databaseValue
        case .blob(let value): value.databaseValue
        }
    }
}

extension StatementArguments {
    init(_ parameters: SqlParameters) {
        self.init(parameters.map { ($0?.sqlValue ?? .null).databaseValue })
    }
}
