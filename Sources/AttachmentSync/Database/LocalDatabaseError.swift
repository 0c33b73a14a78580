import Foundation
import GRDB

/// An error thrown by ``LocalDatabase``, its transactions and its cursors.
///
/// Match on ``code``; the other properties carry the context: the offending identifier or column
/// (``name``), the statement (``sql``), the database file (``path``) and the SQLite error behind it
/// (``underlying``).
///
/// ```swift
/// do {
///     _ = try await db.get(sql: "SELECT title FROM notes WHERE id = ?", parameters: [id]) {
///         try $0.getString(name: "title")
///     }
/// } catch let error as LocalDatabaseError where error.code == .noRows {
///     // no such note
/// }
/// ```
public struct LocalDatabaseError: Error, Sendable, CustomStringConvertible, LocalizedError {
    /// What went wrong.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Sendable {
            case invalidIdentifier
            case invalidSchema
            case invalidPath
            case sqlError
            case columnNotFound
            case nullValue
            case typeMismatch
            case noRows
            case closed
            case cursorExpired
        }

        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// A table, column or index name is not a valid SQL identifier (letters, digits and `_`, not
        /// starting with a digit or `sqlite_`, at most 64 characters). ``LocalDatabaseError/name`` holds it.
        public static let invalidIdentifier = Code(.invalidIdentifier)
        /// The schema contradicts itself: a duplicate table, column or index, a column named `id`, or an
        /// index over an unknown column. ``LocalDatabaseError/name`` holds the name at fault.
        public static let invalidSchema = Code(.invalidSchema)
        /// The database path is empty or its folder cannot be created. ``LocalDatabaseError/path`` holds it.
        public static let invalidPath = Code(.invalidPath)
        /// SQLite rejected a statement: bad syntax, an unknown table, a constraint violation, a wrong
        /// number of parameters. ``LocalDatabaseError/sql`` holds the statement and
        /// ``LocalDatabaseError/sqliteCode`` the SQLite result code.
        public static let sqlError = Code(.sqlError)
        /// A cursor was asked for a column the row does not have. ``LocalDatabaseError/name`` holds it.
        public static let columnNotFound = Code(.columnNotFound)
        /// A non-optional cursor getter met `NULL`. ``LocalDatabaseError/name`` holds the column.
        public static let nullValue = Code(.nullValue)
        /// A cursor getter met a value of another type (text where an integer was asked for, say).
        /// ``LocalDatabaseError/name`` holds the column.
        public static let typeMismatch = Code(.typeMismatch)
        /// `get` found no row.
        public static let noRows = Code(.noRows)
        /// The database was closed with `LocalDatabase.close()`.
        public static let closed = Code(.closed)
        /// A ``SqlCursor`` was read after the mapper call it was passed to had returned (it was kept, or
        /// returned as the mapper's value). ``LocalDatabaseError/name`` holds the column asked for.
        public static let cursorExpired = Code(.cursorExpired)

        /// A readable description, for logs and test failures.
        public var description: String { value.rawValue }
    }

    /// What went wrong.
    public var code: Code
    /// A human-readable explanation that names the offending value.
    public var message: String
    /// The identifier or column the error is about, when there is one.
    public var name: String?
    /// The SQL statement the error is about, when there is one.
    public var sql: String?
    /// The database file the error is about, when there is one.
    public var path: String?
    /// The error that caused this one (a GRDB `DatabaseError`, a file system error), when there is one.
    public var underlying: (any Error)?

    /// Creates an error. The library creates these; apps usually only inspect them.
    public init(
        code: Code,
        message: String,
        name: String? = nil,
        sql: String? = nil,
        path: String? = nil,
        underlying: (any Error)? = nil
    ) {
        self.code = code
        self.message = message
        self.name = name
        self.sql = sql
        self.path = path
        self.underlying = underlying
    }

    /// The primary SQLite result code of an ``Code/sqlError`` (`19` for a constraint violation, say).
    public var sqliteCode: Int32? {
        (underlying as? DatabaseError)?.resultCode.primaryResultCode.rawValue
    }

    /// A readable description, for logs and test failures.
    public var description: String {
        var text = "LocalDatabaseError.\(code): \(message)"
        if let sql { text += " [SQL: \(sql)]" }
        return text
    }

    /// The same text as `description`, for `localizedDescription`.
    public var errorDescription: String? { description }
}

extension LocalDatabaseError {
    /// Converts errors that GRDB throws into ``LocalDatabaseError``; any other error passes unchanged, so
    /// an error thrown by a caller's closure reaches the caller as it was thrown.
    static func wrapping(_ error: any Error, sql: String? = nil) -> any Error {
        guard let databaseError = error as? DatabaseError else { return error }
        if databaseError.resultCode == .SQLITE_MISUSE, databaseError.message?.contains("closed") == true {
            return LocalDatabaseError(code: .closed, message: "the database is closed", underlying: databaseError)
        }
        return LocalDatabaseError(
            code: .sqlError,
            message: databaseError.message ?? "\(databaseError.resultCode)",
            sql: sql ?? databaseError.sql,
            underlying: databaseError
        )
    }

    /// Runs `body`, converting the GRDB errors it throws.
    static func converting<T>(sql: String? = nil, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch {
            throw wrapping(error, sql: sql)
        }
    }
}
