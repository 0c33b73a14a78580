import Foundation

/// Every attachment's local file checked against its record, and the files no record claims: read-only, for
/// tools (the `attachment-sync verify` command) and for an app's own diagnostics.
///
/// A record that claims a file is checked for the file's presence, its size (when the record knows it) and
/// its SHA-256 (when the record knows it; the file is read in chunks). A file in the attachments directory
/// that no record claims is listed too, unless it is one of the queue's temporary files (a save, a download
/// or a partial download in progress) or a subdirectory. Nothing is changed: where the queue can repair a
/// finding, its next startup does (a synced file that is missing is downloaded again, an orphan it made is
/// removed).
///
/// ```swift
/// let db = try LocalDatabase.readOnly(path: "app.sqlite")
/// let check = try await LocalFileVerification.verify(db: db, attachmentsDirectory: "attachments")
/// for finding in check.findings { print(finding) }
/// ```
public struct LocalFileVerification: Sendable {
    /// What is wrong with one file.
    public enum Problem: Sendable, Hashable, CustomStringConvertible {
        /// The record claims a file that is not there.
        case missing
        /// The file's size is not the record's.
        case wrongSize(expected: Int64, actual: Int64)
        /// The file's SHA-256 (lowercase hex) is not the record's.
        case wrongHash(expected: String, actual: String)
        /// No record claims the file.
        case unclaimed

        /// The problem in a few words, for people.
        public var description: String {
            switch self {
            case .missing: "missing"
            case .wrongSize(let expected, let actual): "\(actual) bytes, the record says \(expected)"
            case .wrongHash(let expected, let actual): "SHA-256 \(actual), the record says \(expected)"
            case .unclaimed: "no record claims it"
            }
        }
    }

    /// One file that disagrees with the table.
    public struct Finding: Sendable, Hashable {
        /// The attachment whose record claims the file; `nil` for an unclaimed file.
        public var attachmentId: String?
        /// The record's state; `nil` for an unclaimed file.
        public var state: AttachmentState?
        /// The file's name in the attachments directory.
        public var file: String
        /// What is wrong.
        public var problem: Problem
        /// Whether the remote holds the content (the record says it was uploaded or downloaded): a damaged
        /// or missing local copy can be fetched again. `false` means this file was the only copy.
        public var remoteHasContent: Bool
    }

    /// How many records claiming a local file were checked.
    public var checkedFiles: Int
    /// The bytes read to check hashes.
    public var bytesHashed: Int64
    /// What disagrees, records first (by id), then unclaimed files (by name).
    public var findings: [Finding]

    /// Whether every file agrees with its record and no file is unclaimed.
    public var isClean: Bool { findings.isEmpty }

    /// Checks the files in `attachmentsDirectory` against the attachments table of `db`.
    ///
    /// - Parameters:
    ///   - db: The app's database (``LocalDatabase/readOnly(path:configuration:)`` for a tool).
    ///   - attachmentsDirectory: The queue's attachments directory.
    ///   - table: The attachments table's name. The default is `attachments`.
    ///   - subdirectories: Folders of the directory that are the app's (``AttachmentQueue/Configuration/subdirectories``):
    ///     not reported. The default is none.
    ///   - progress: Called after each record with how many have been checked and how many there are. The
    ///     default is `nil`.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/invalidConfiguration``
    ///   for a missing table or attachments directory, ``AttachmentError/Code-swift.struct/invalidName``
    ///   for a bad table name; database and file system errors.
    public static func verify(
        db: LocalDatabase, attachmentsDirectory: String, table: String = "attachments",
        subdirectories: [String] = [], progress: (@Sendable (_ checked: Int, _ total: Int) -> Void)? = nil
    ) async throws -> LocalFileVerification {
        try AttachmentStore.validateTableName(table)
        let directory = URL(fileURLWithPath: attachmentsDirectory, isDirectory: true).standardizedFileURL
        let files = SystemFileOperations()
        guard files.infoFollowingLinks(atPath: directory.path)?.kind == .directory else {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "there is no attachments directory at \(String(reflecting: directory.path))",
                path: directory.path)
        }
        // The listing comes before the read of the table: a file saved meanwhile is then claimed by its record.
        let names = try files.contentsOfDirectory(atPath: directory.path)
        let records = try await AttachmentStore.allRecords(of: db, table: table)
        var findings: [Finding] = []
        var checked = 0
        var hashed: Int64 = 0
        let claiming = records.filter { $0.localPath != nil }.sorted { $0.id < $1.id }
        for record in claiming {
            guard let relative = record.localPath else { continue }
            let path = directory.appendingPathComponent(relative).path
            func finding(_ problem: Problem) -> Finding {
                Finding(
                    attachmentId: record.id, state: record.state, file: relative, problem: problem,
                    remoteHasContent: record.hasSynced)
            }
            checked += 1
            defer { progress?(checked, claiming.count) }
            guard let info = files.infoFollowingLinks(atPath: path), info.kind == .regular else {
                findings.append(finding(.missing))
                continue
            }
            if let expected = record.size, expected != info.size {
                findings.append(finding(.wrongSize(expected: expected, actual: info.size)))
                continue
            }
            if let expected = record.contentHash?.lowercased() {
                let digest = try await files.digest(ofFileAt: path)
                hashed = hashed.addingClamped(digest.size)
                if digest.sha256 != expected {
                    findings.append(finding(.wrongHash(expected: expected, actual: digest.sha256)))
                }
            }
        }
        let claimed = Set(claiming.compactMap(\.localPath))
        let subfolders = Set(subdirectories)
        for name in names.sorted()
        where !claimed.contains(name) && !subfolders.contains(name) && !name.hasPrefix(FileName.temporaryPrefix) {
            if files.info(atPath: directory.appendingPathComponent(name).path)?.kind == .directory { continue }
            findings.append(
                Finding(attachmentId: nil, state: nil, file: name, problem: .unclaimed, remoteHasContent: false))
        }
        return LocalFileVerification(checkedFiles: checked, bytesHashed: hashed, findings: findings)
    }
}
