import Foundation

/// Every attachment the remote should hold checked against what it holds: read-only, for tools (the
/// `attachment-sync verify --remote` command) and for an app's own diagnostics.
///
/// A record whose content was uploaded or downloaded (``Attachment/hasSynced``) and that is neither being
/// deleted nor archived should have a remote file (an archived attachment's remote copy may be gone for a
/// good reason: another device deleted it): it is checked for the file's presence, its size (when the record
/// knows it) and the SHA-256 stored with it (when both the record and the remote know one). Nothing is
/// downloaded: the remote describes each file (``ListableRemoteStorage/fileInfo(attachment:)``), a few at a
/// time. The table is read a page of records at a time, so memory does not grow with it (only with the
/// findings).
///
/// The files of an app that encrypts them (``EncryptedRemoteStorage``) are checked with `encrypted: true`,
/// without keys: a remote file must be as long as an encrypted file of the record's content is (the stored
/// SHA-256 is the ciphertext's, which the record does not know), or be a plain file that matches the
/// record as above (stored before encryption was turned on). Whether its bytes decrypt takes the keys: the
/// app's queue checks that at every download.
///
/// ```swift
/// let db = try LocalDatabase.readOnly(path: "app.sqlite")
/// let check = try await RemoteVerification.verify(db: db, remote: FileSystemRemoteStorage(directory: "/srv/att"))
/// for finding in check.findings { print(finding.filename, finding.problem) }
/// ```
public struct RemoteVerification: Sendable {
    /// What is wrong with one remote file.
    public enum Problem: Sendable, Hashable, CustomStringConvertible {
        /// The remote has no file for the record.
        case missing
        /// The remote file's size is not the record's.
        case wrongSize(expected: Int64, actual: Int64)
        /// The SHA-256 stored with the remote file (lowercase hex) is not the record's.
        case wrongHash(expected: String, actual: String)
        /// Checked as an encrypted file: no encrypted file of the record's `contentSize` bytes (nor the plain
        /// content) is `actual` bytes long.
        case wrongEncryptedSize(contentSize: Int64, actual: Int64)

        /// The problem in a few words, for people.
        public var description: String {
            switch self {
            case .missing: "missing from remote storage"
            case .wrongSize(let expected, let actual): "remote file is \(actual) bytes, the record says \(expected)"
            case .wrongHash(let expected, let actual):
                "remote file has SHA-256 \(actual), the record says \(expected)"
            case .wrongEncryptedSize(let contentSize, let actual):
                "remote file is \(actual) bytes, which no encrypted file of the record's \(contentSize) bytes is"
            }
        }
    }

    /// One record whose remote file disagrees with it.
    public struct Finding: Sendable, Hashable {
        /// The attachment.
        public var attachmentId: String
        /// The record's state.
        public var state: AttachmentState
        /// The attachment's filename (the remote file's name).
        public var filename: String
        /// What is wrong.
        public var problem: Problem
        /// Whether the record has a local file (it may be damaged too: see ``LocalFileVerification``).
        public var hasLocalFile: Bool
        /// The SHA-256 stored with the remote file, when it has one: a hash other than the record's means
        /// another upload under the same name (a conflict), not damage.
        public var remoteSHA256: String?
        /// The SHA-256 the record has for the content (lowercase hex), when it has one.
        public var recordSHA256: String?
    }

    /// How many records were checked against the remote.
    public var checkedFiles: Int
    /// What disagrees, by attachment id.
    public var findings: [Finding]

    /// Whether every checked record's remote file agrees with it.
    public var isClean: Bool { findings.isEmpty }

    /// How many remote files are described at once.
    static let concurrency = 8

    /// How many records are read from the table at once.
    static let pageSize = 1_000

    /// Checks the remote files of the records in the attachments table of `db`.
    ///
    /// - Parameters:
    ///   - db: The app's database (``LocalDatabase/readOnly(path:configuration:)`` for a tool).
    ///   - remote: The remote storage the app's queue uses.
    ///   - table: The attachments table's name. The default is `attachments`.
    ///   - encrypted: Whether the app encrypts its files (``EncryptedRemoteStorage``): sizes are checked as
    ///     an encrypted file's (or the plain content's). The default is `false`.
    ///   - stateFile: An SQLite file that keeps how far the check got and what it found, created when
    ///     missing: a check interrupted (a crash, a lost connection, Ctrl-C) goes on after the last page of
    ///     records it finished when run again with the same file and settings, and a finished one is
    ///     reported again without asking the remote anything (remove the file to check anew). Records added
    ///     meanwhile with ids before that page are not checked by the resumed run. The default is `nil`: the
    ///     check keeps its findings in memory.
    ///   - remoteName: What identifies the remote in the state file (a URL, say): a state file made for
    ///     another remote is refused. The default is `nil`: the adapter's type name.
    ///   - progress: Called after each record with how many have been checked and how many there are. The
    ///     default is `nil`.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/invalidConfiguration``
    ///   for a missing table, or a state file that is not one or holds a check with other settings (the
    ///   message names both), ``AttachmentError/Code-swift.struct/invalidName`` for a bad table name;
    ///   database errors, and what the remote throws (a file it cannot describe is an error, not a finding);
    ///   ``AttachmentError/Code-swift.struct/remoteNotFound`` when records claim uploads and the remote's
    ///   location does not exist (see ``ListableRemoteStorage/locationExists()``).
    public static func verify(
        db: LocalDatabase, remote: some ListableRemoteStorage, table: String = "attachments",
        encrypted: Bool = false, stateFile: URL? = nil, remoteName: String? = nil,
        progress: (@Sendable (_ checked: Int, _ total: Int) -> Void)? = nil
    ) async throws -> RemoteVerification {
        try AttachmentStore.validateTableName(table)
        let store = AttachmentStore(table: table)
        let state = try stateFile.map {
            try VerificationState(
                url: $0,
                settings: [
                    "table": table.databaseValue, "encrypted": encrypted.databaseValue,
                    "remote": (remoteName ?? String(reflecting: type(of: remote))).databaseValue,
                ])
        }
        defer { try? state?.file.queue.close() }
        let (start, checkedBefore, done) = try state?.position() ?? (nil, 0, false)
        if let state, done {
            return RemoteVerification(checkedFiles: checkedBefore, findings: try await state.findings())
        }
        /// Whether the record should have a remote file.
        @Sendable func isDue(_ record: AttachmentRecord) -> Bool {
            record.hasSynced && record.state != .queuedDelete && record.state != .archived
        }
        // With a progress report, the records due are counted first, one row at a time.
        let total = try await db.readTransaction { tx in
            try store.checkTable(in: tx)
            guard progress != nil else { return 0 }
            var due = 0
            try tx.forEachRow(sql: "SELECT \(AttachmentRecord.columns) FROM \(store.table)", parameters: []) { cursor in
                if isDue(try AttachmentRecord(cursor: cursor)) { due += 1 }
                return true
            }
            return due
        }
        let directory = URL(fileURLWithPath: "/", isDirectory: true)
        var findings: [Finding] = []
        var checked = checkedBefore
        var located = false
        var after = start
        // The table is read a page at a time in the order of the ids, so memory does not grow with it.
        for _ in 0..<Int.max {
            let page = try await db.readTransaction { [after] tx in
                try store.records(after: after, limit: pageSize, in: tx)
            }
            guard let last = page.last else { break }
            after = last.id
            var found: [Finding] = []
            let records = page.filter(isDue)
            if !records.isEmpty, !located {
                try await requireLocation(of: remote)
                located = true
            }
            try await withThrowingTaskGroup(of: Finding?.self) { group in
                var next = records.makeIterator()
                func startNext() {
                    guard let record = next.next() else { return }
                    let attachment = record.attachment(in: directory)
                    group.addTask {
                        let info = try await remote.fileInfo(attachment: attachment)
                        let problem = Self.problem(record: record, info: info, encrypted: encrypted)
                        return problem.map {
                            Finding(
                                attachmentId: record.id, state: record.state, filename: record.filename,
                                problem: $0, hasLocalFile: record.localPath != nil,
                                remoteSHA256: info?.sha256?.lowercased(), recordSHA256: record.contentHash?.lowercased()
                            )
                        }
                    }
                }
                for _ in 0..<concurrency { startNext() }
                while let finding = try await group.next() {
                    checked += 1
                    progress?(checked, max(total, checked))
                    if let finding { found.append(finding) }
                    startNext()
                }
            }
            if let state {
                try await state.record(found, after: after, checked: checked, done: false)
            } else {
                findings += found
            }
        }
        if let state {
            try await state.record([], after: after, checked: checked, done: true)
            findings = try await state.findings()
        }
        return RemoteVerification(
            checkedFiles: checked, findings: findings.sorted { $0.attachmentId < $1.attachmentId })
    }

    /// Throws ``AttachmentError/Code-swift.struct/remoteNotFound`` unless `remote`'s location exists (see
    /// ``ListableRemoteStorage/locationExists()``): with a mistyped bucket, prefix or folder, every file
    /// would look missing.
    package static func requireLocation(of remote: some ListableRemoteStorage) async throws {
        guard try await remote.locationExists() else {
            throw AttachmentError(
                code: .remoteNotFound,
                message: "remote storage has nothing at this location (no such folder or bucket, or no object "
                    + "under the key prefix): check it; no file was judged missing and nothing was changed")
        }
    }

    static func problem(record: AttachmentRecord, info: RemoteObjectInfo?, encrypted: Bool = false) -> Problem? {
        guard let info else { return .missing }
        if encrypted, let contentSize = record.size, let actual = info.size, actual != contentSize {
            // An encrypted file is never as long as its content; the plain file of the same length is checked
            // below, as without encryption.
            guard EncryptedFormat.isCiphertextSize(actual, contentSize: contentSize) else {
                return .wrongEncryptedSize(contentSize: contentSize, actual: actual)
            }
            return nil
        }
        if encrypted, record.size == nil || info.size == nil {
            // Without a size to compare, a hash other than the record's is the ciphertext's: no finding.
            return nil
        }
        if let expected = record.size, let actual = info.size, expected != actual {
            return .wrongSize(expected: expected, actual: actual)
        }
        if let expected = record.contentHash?.lowercased(), FileStreaming.isSHA256(expected),
            let actual = info.sha256?.lowercased(), expected != actual
        {
            return .wrongHash(expected: expected, actual: actual)
        }
        return nil
    }
}
