/// Validation and quoting of the SQL identifiers a schema declares.
enum SqlIdentifier {
    /// The longest identifier accepted.
    static let maximumLength = 64

    /// Throws ``LocalDatabaseError/Code-swift.struct/invalidIdentifier`` unless `name` is ASCII letters, digits
    /// and `_`, does not start with a digit or SQLite's reserved `sqlite_` prefix, and has 1 to 64 characters.
    static func validate(_ name: String, kind: String) throws {
        func fail(_ reason: String) -> LocalDatabaseError {
            LocalDatabaseError(
                code: .invalidIdentifier,
                message: "invalid \(kind) name \(String(reflecting: name)): \(reason)",
                name: name
            )
        }
        guard !name.isEmpty else { throw fail("it is empty") }
        guard name.utf8.count <= maximumLength else {
            throw fail("it is longer than \(maximumLength) characters")
        }
        for byte in name.utf8 {
            let isLetter = (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x5F
            let isDigit = byte >= 0x30 && byte <= 0x39
            guard isLetter || isDigit else {
                throw fail("only ASCII letters, digits and _ are allowed")
            }
        }
        if let first = name.utf8.first, first >= 0x30 && first <= 0x39 {
            throw fail("it starts with a digit")
        }
        if name.lowercased().hasPrefix("sqlite_") {
            throw fail("the sqlite_ prefix is reserved by SQLite")
        }
    }

    /// `name` as a double-quoted SQL identifier.
    static func quote(_ name: String) -> String {
        "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    /// `value` as an SQL string literal (single quotes, doubled inside).
    static func quoteLiteral(_ value: String) -> String {
        "'" + value.replacingOccurrences(of: "'", with: "''") + "'"
    }
}
