import Foundation
import GRDB

/// Read access to the current row of a query, handed to the `mapper` closures of ``LocalDatabase``.
///
/// Each getter reads a column by name. A missing column, a `NULL` met by a non-optional getter, and a
/// value of another type are typed ``LocalDatabaseError``s that name the column. Types are strict:
/// `getString` reads `TEXT`, `getInt`/`getInt64` read `INTEGER`, `getDouble` reads `REAL` or `INTEGER`,
/// `getBoolean` reads `INTEGER` (zero is `false`), `getData` reads `BLOB`.
///
/// A cursor is valid only during the mapper call it is passed to; copy out the values you need. Read later, its
/// getters throw ``LocalDatabaseError/Code-swift.struct/cursorExpired``.
///
/// ```swift
/// let titles = try await db.getAll(sql: "SELECT title, done FROM todos", parameters: []) { cursor in
///     (try cursor.getString(name: "title"), try cursor.getBoolean(name: "done"))
/// }
/// ```
public struct SqlCursor {
    let columns: SqlColumns
    private let source: Source

    /// Where a row's values are read from.
    private enum Source {
        /// Copied out: `values[base..<base + columns.names.count]` (a watch's result set keeps all of its rows
        /// in one array).
        case stored([SqlValue], base: Int)
        /// The statement's current row, read in place: only the columns a mapper asks for are converted, and
        /// nothing is allocated per row. Valid while `position` is still at `row`: the statement steps on
        /// after the mapper call, and is reset (or finalized) after the last row.
        case statement(Statement, position: RowPosition, row: Int)
    }

    /// Which row a statement's cursors may read: the row number it stands on, or -1 once the read is over.
    final class RowPosition {
        var current = 0
    }

    /// A cursor over row `values[base...]` of stored values.
    init(columns: SqlColumns, values: [SqlValue], base: Int = 0) {
        self.columns = columns
        self.source = .stored(values, base: base)
    }

    /// A cursor over the current row of a statement that has just stepped to it (`position.current`).
    init(columns: SqlColumns, statement: Statement, position: RowPosition) {
        self.columns = columns
        self.source = .statement(statement, position: position, row: position.current)
    }

    /// Whether the cursor can still be read: always for stored values; for a statement's row, only during
    /// the mapper call it was passed to.
    var isCurrent: Bool {
        switch source {
        case .stored: true
        case .statement(_, let position, let row): position.current == row
        }
    }

    /// The value of the column at `index`, which must be a valid index of ``columns``, of a cursor that
    /// ``isCurrent``: for the library's own reads of a query whose columns it wrote, so it need not look
    /// names up for every row.
    func value(at index: Int) -> SqlValue {
        switch source {
        case .stored(let values, let base): values[base + index]
        case .statement(let statement, _, _):
            SqlValue(DatabaseValue(sqliteStatement: statement.sqliteStatement, index: CInt(index)))
        }
    }

    /// The names of the row's columns, in the order the query selects them.
    public var columnNames: [String] { columns.names }

    /// The raw value of a column. Names are compared case-insensitively, as SQLite does; when two columns
    /// share a name, the leftmost one is read.
    ///
    /// - Throws: ``LocalDatabaseError/Code-swift.struct/columnNotFound`` when the row has no such column,
    ///   ``LocalDatabaseError/Code-swift.struct/cursorExpired`` when the mapper call the cursor was passed to
    ///   has returned.
    public func getValue(name: String) throws -> SqlValue {
        try value(at: columns.index(of: name), name: name)
    }

    /// The raw value of the column `name` found at `index` (`nil`: the row has none), with the errors of
    /// ``getValue(name:)``: for a reader that looked the columns up once for many rows.
    func value(at index: Int?, name: String) throws -> SqlValue {
        guard isCurrent else {
            throw LocalDatabaseError(
                code: .cursorExpired,
                message: "column \(String(reflecting: name)) was read from a cursor after its mapper call returned; "
                    + "copy out the values you need inside the mapper",
                name: name)
        }
        guard let index, index >= 0, index < columns.names.count else {
            throw LocalDatabaseError(
                code: .columnNotFound,
                message: "the row has no column \(String(reflecting: name)) (it has: "
                    + columns.names.map { String(reflecting: $0) }.joined(separator: ", ") + ")",
                name: name
            )
        }
        return value(at: index)
    }

    /// The `TEXT` value of a column.
    public func getString(name: String) throws -> String { try required(name, getStringOptional) }
    /// The `TEXT` value of a column, or `nil` for `NULL`.
    public func getStringOptional(name: String) throws -> String? {
        try stringOptional(at: columns.index(of: name), name: name)
    }

    /// The `INTEGER` value of a column.
    public func getInt(name: String) throws -> Int { try required(name, getIntOptional) }
    /// The `INTEGER` value of a column, or `nil` for `NULL`.
    public func getIntOptional(name: String) throws -> Int? {
        try intOptional(at: columns.index(of: name), name: name)
    }

    /// The `INTEGER` value of a column.
    public func getInt64(name: String) throws -> Int64 { try required(name, getInt64Optional) }
    /// The `INTEGER` value of a column, or `nil` for `NULL`.
    public func getInt64Optional(name: String) throws -> Int64? {
        try int64Optional(at: columns.index(of: name), name: name)
    }

    /// The `REAL` (or `INTEGER`) value of a column.
    public func getDouble(name: String) throws -> Double { try required(name, getDoubleOptional) }
    /// The `REAL` (or `INTEGER`) value of a column, or `nil` for `NULL`.
    public func getDoubleOptional(name: String) throws -> Double? {
        try typed(name, "REAL") {
            switch $0 {
            case .real(let value): value
            case .integer(let value): Double(value)
            default: nil
            }
        }
    }

    /// The `INTEGER` value of a column as a boolean: `0` is `false`, anything else `true`.
    public func getBoolean(name: String) throws -> Bool { try required(name, getBooleanOptional) }
    /// The `INTEGER` value of a column as a boolean, or `nil` for `NULL`.
    public func getBooleanOptional(name: String) throws -> Bool? {
        try booleanOptional(at: columns.index(of: name), name: name)
    }

    /// The `BLOB` value of a column.
    public func getData(name: String) throws -> Data { try required(name, getDataOptional) }
    /// The `BLOB` value of a column, or `nil` for `NULL`.
    public func getDataOptional(name: String) throws -> Data? {
        try typed(name, "BLOB") { if case .blob(let value) = $0 { value } else { nil } }
    }

    private func typed<T>(_ name: String, _ expected: String, _ extract: (SqlValue) -> T?) throws -> T? {
        try typed(at: columns.index(of: name), name: name, expected, extract)
    }

    // The getters by position, for a reader that looked the columns up once for many rows (`index` `nil`:
    // the row has no column `name`): the same types and errors as the named getters, which use them.

    /// ``getStringOptional(name:)`` of the column `name` found at `index`.
    func stringOptional(at index: Int?, name: String) throws -> String? {
        try typed(at: index, name: name, "TEXT") { if case .text(let value) = $0 { value } else { nil } }
    }

    /// ``getIntOptional(name:)`` of the column `name` found at `index`.
    func intOptional(at index: Int?, name: String) throws -> Int? {
        try typed(at: index, name: name, "INTEGER") {
            if case .integer(let value) = $0 { Int(exactly: value) } else { nil }
        }
    }

    /// ``getInt64Optional(name:)`` of the column `name` found at `index`.
    func int64Optional(at index: Int?, name: String) throws -> Int64? {
        try typed(at: index, name: name, "INTEGER") { if case .integer(let value) = $0 { value } else { nil } }
    }

    /// ``getBooleanOptional(name:)`` of the column `name` found at `index`.
    func booleanOptional(at index: Int?, name: String) throws -> Bool? {
        try typed(at: index, name: name, "INTEGER (boolean)") {
            if case .integer(let value) = $0 { value != 0 } else { nil }
        }
    }

    /// The typed value of the column `name` found at `index`, with the errors of the named getters.
    private func typed<T>(at index: Int?, name: String, _ expected: String, _ extract: (SqlValue) -> T?) throws -> T? {
        let value = try value(at: index, name: name)
        if case .null = value { return nil }
        guard let result = extract(value) else {
            throw LocalDatabaseError(
                code: .typeMismatch,
                message: "column \(String(reflecting: name)) holds \(value.storageClass) \(value), not \(expected)",
                name: name
            )
        }
        return result
    }

    private func required<T>(_ name: String, _ getter: (String) throws -> T?) throws -> T {
        guard let value = try getter(name) else { throw Self.null(name) }
        return value
    }

    /// The error of a required getter reading `NULL` in the column `name`.
    static func null(_ name: String) -> LocalDatabaseError {
        LocalDatabaseError(
            code: .nullValue,
            message: "column \(String(reflecting: name)) is NULL; use the Optional getter to read NULLs",
            name: name)
    }
}

/// The column names of a result set, with a case-insensitive index shared by all of its rows.
final class SqlColumns: Sendable, Equatable {
    let names: [String]

    init(_ names: [String]) {
        self.names = names
    }

    /// The leftmost column named `name`, ignoring case. A scan, not a hash table: rows have a few dozen
    /// columns at most, and comparing short names costs less than hashing them (this runs for every column of
    /// every row a query maps).
    func index(of name: String) -> Int? {
        if let index = names.firstIndex(where: { Self.sameIgnoringASCIICase($0, name) }) { return index }
        // Names beyond ASCII: compared in lowercase, as before the scan.
        guard !name.utf8.allSatisfy({ $0 < 0x80 }) || names.contains(where: { !$0.utf8.allSatisfy { $0 < 0x80 } })
        else { return nil }
        let lowered = name.lowercased()
        return names.firstIndex { $0.lowercased() == lowered }
    }

    private static func sameIgnoringASCIICase(_ a: String, _ b: String) -> Bool {
        if a == b { return true }
        guard a.utf8.count == b.utf8.count else { return false }
        for (x, y) in zip(a.utf8, b.utf8) where x != y {
            let foldedX = (65...90).contains(x) ? x + 32 : x
            let foldedY = (65...90).contains(y) ? y + 32 : y
            if foldedX != foldedY { return false }
        }
        return true
    }

    static func == (lhs: SqlColumns, rhs: SqlColumns) -> Bool { lhs.names == rhs.names }
}

/// A whole result set as plain values: what a watch compares and hands across tasks. The rows' values are
/// kept one after the other in one array (row `r`'s column `c` at `r * width + c`): a watch of a million rows
/// holds one allocation, not a million.
struct SqlResultSet: Sendable, Equatable {
    let columns: SqlColumns
    /// Every row's values, row after row.
    let values: [SqlValue]
    let rowCount: Int

    func map<T>(_ mapper: (SqlCursor) throws -> T) rethrows -> [T] {
        let width = columns.names.count
        var mapped: [T] = []
        mapped.reserveCapacity(rowCount)
        for row in 0..<rowCount {
            mapped.append(try mapper(SqlCursor(columns: columns, values: values, base: row * width)))
        }
        return mapped
    }
}

extension SqlTransaction {
    /// Runs a query and hands each row to `body` as a cursor.
    func forEachRow(sql: String, parameters: SqlParameters, _ body: (SqlCursor) throws -> Bool) throws {
        try LocalDatabaseError.converting(sql: sql) {
            let statement = try caching ? db.cachedStatement(sql: sql) : db.makeStatement(sql: sql)
            let columns = SqlColumns(statement.columnNames)
            let rows = try Row.fetchCursor(statement, arguments: StatementArguments(parameters))
            let position = SqlCursor.RowPosition()
            // A cursor kept beyond its call reads nothing (its statement may be reset or finalized by then).
            defer { position.current = -1 }
            while try rows.next() != nil {
                // Errors thrown by `body` (a caller's mapper) must pass through unconverted; they are not
                // GRDB's, so `converting` leaves them as they are.
                guard try body(SqlCursor(columns: columns, statement: statement, position: position)) else { return }
                position.current += 1
            }
        }
    }

    /// Runs a query and keeps its whole result as plain values (with ``caching``, from the connection's
    /// statement cache: the rows are all read before anything else runs, so no use of it is nested).
    func fetchResultSet(sql: String, arguments: StatementArguments) throws -> SqlResultSet {
        let statement = try caching ? db.cachedStatement(sql: sql) : db.makeStatement(sql: sql)
        let columns = SqlColumns(statement.columnNames)
        let rows = try Row.fetchCursor(statement, arguments: arguments)
        let handle = statement.sqliteStatement
        let width = CInt(columns.names.count)
        var values: [SqlValue] = []
        var rowCount = 0
        while try rows.next() != nil {
            for index in 0..<width { values.append(SqlValue(DatabaseValue(sqliteStatement: handle, index: index))) }
            rowCount += 1
        }
        return SqlResultSet(columns: columns, values: values, rowCount: rowCount)
    }
}
