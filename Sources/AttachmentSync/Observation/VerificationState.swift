import Foundation
import GRDB

/// How far a ``RemoteVerification`` with a state file got, and what it found: kept in an SQLite file (see
/// ``StateFile``) so that an interrupted check goes on after the last page of records it finished.
///
/// `meta` holds the check's settings, the id of the last record of the last page finished (`after`), how
/// many records were checked, and whether the check is done; `findings` holds one row per finding.
struct VerificationState: Sendable {
    let file: StateFile

    static let format = "attachment-sync verify state"

    /// The format this code writes; a file of another is refused.
    static let version = 1

    /// Opens (creating it) the state file at `url` and records `settings` in it, or checks them against
    /// those of the check it holds.
    init(url: URL, settings: [String: DatabaseValue]) throws {
        file = try StateFile(
            url: url, format: Self.format, what: "a remote verification", label: "AttachmentSync.RemoteVerification",
            schema: """
                CREATE TABLE IF NOT EXISTS findings (
                    id TEXT PRIMARY KEY, state INTEGER NOT NULL, filename TEXT NOT NULL, problem TEXT NOT NULL,
                    expected TEXT, actual TEXT, hasLocalFile INTEGER NOT NULL, remoteSHA256 TEXT,
                    recordSHA256 TEXT) WITHOUT ROWID
                """)
        var all = settings
        all["version"] = Self.version.databaseValue
        if try file.meta("checked").isNull {
            all["checked"] = 0.databaseValue
            all["done"] = false.databaseValue
            try file.setMetaNow(all)
        } else {
            try file.check(all, holding: "a verification")
        }
    }

    /// Where the check stands: the id after which records are still to be checked (`nil`: from the first),
    /// how many were checked, and whether it is done.
    func position() throws -> (after: String?, checked: Int, done: Bool) {
        (
            String.fromDatabaseValue(try file.meta("after")), Int.fromDatabaseValue(try file.meta("checked")) ?? 0,
            Bool.fromDatabaseValue(try file.meta("done")) ?? false
        )
    }

    /// Records a finished page: its findings, the id of its last record, the count checked so far, and
    /// whether it was the last, in one transaction.
    func record(
        _ findings: [RemoteVerification.Finding], after: String?, checked: Int, done: Bool
    ) async throws {
        try await file.writing { db in
            let insert = try db.cachedStatement(
                sql: """
                    INSERT OR REPLACE INTO findings
                        (id, state, filename, problem, expected, actual, hasLocalFile, remoteSHA256, recordSHA256)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """)
            for finding in findings {
                let (problem, expected, actual) = Self.columns(of: finding.problem)
                try insert.execute(arguments: [
                    finding.attachmentId, finding.state.rawValue, finding.filename, problem, expected, actual,
                    finding.hasLocalFile, finding.remoteSHA256, finding.recordSHA256,
                ])
            }
            try StateFile.setMeta(
                ["after": after.databaseValue, "checked": checked.databaseValue, "done": done.databaseValue], in: db)
        }
    }

    /// Every finding recorded, by attachment id.
    func findings() async throws -> [RemoteVerification.Finding] {
        let path = file.url.path
        return try await file.reading { db in
            let rows = try Row.fetchCursor(db, sql: "SELECT * FROM findings ORDER BY id")
            var findings: [RemoteVerification.Finding] = []
            while let row = try rows.next() {
                let expected: String? = row["expected"]
                let actual: String? = row["actual"]
                guard let state = AttachmentState(rawValue: row["state"]),
                    let problem = Self.problem(row["problem"], expected: expected, actual: actual)
                else {
                    throw AttachmentError(
                        code: .invalidConfiguration,
                        message: "the state file \(path) holds a finding this version cannot read", path: path)
                }
                findings.append(
                    RemoteVerification.Finding(
                        attachmentId: row["id"], state: state, filename: row["filename"], problem: problem,
                        hasLocalFile: row["hasLocalFile"], remoteSHA256: row["remoteSHA256"],
                        recordSHA256: row["recordSHA256"]))
            }
            return findings
        }
    }

    static func columns(of problem: RemoteVerification.Problem) -> (String, String?, String?) {
        switch problem {
        case .missing: ("missing", nil, nil)
        case .wrongSize(let expected, let actual): ("wrongSize", String(expected), String(actual))
        case .wrongHash(let expected, let actual): ("wrongHash", expected, actual)
        case .wrongEncryptedSize(let contentSize, let actual):
            ("wrongEncryptedSize", String(contentSize), String(actual))
        }
    }

    static func problem(_ name: String, expected: String?, actual: String?) -> RemoteVerification.Problem? {
        switch name {
        case "missing": return .missing
        case "wrongHash":
            guard let expected, let actual else { return nil }
            return .wrongHash(expected: expected, actual: actual)
        case "wrongSize", "wrongEncryptedSize":
            guard let expected = expected.flatMap({ Int64($0) }), let actual = actual.flatMap({ Int64($0) }) else {
                return nil
            }
            return name == "wrongSize"
                ? .wrongSize(expected: expected, actual: actual)
                : .wrongEncryptedSize(contentSize: expected, actual: actual)
        default: return nil
        }
    }
}
