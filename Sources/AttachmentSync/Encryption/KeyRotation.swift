import Foundation

/// Re-encrypts the stored files of an app's attachments under its ``KeyProvider``'s current key: after a
/// key was rotated (or leaked), so that the old key can be retired. The `attachment-sync rotate-keys`
/// command runs it; an app or a server may too.
///
/// Every attachment of the table whose file remote storage should hold (uploaded or downloaded, not being
/// deleted) is looked at: a file encrypted with another key is decrypted and encrypted again under the
/// current one (authenticated first, and checked against the record's SHA-256 when it has one), a plain
/// file the remote's ``EncryptedRemoteStorage/plaintextReads`` accepts is encrypted, one under the current
/// key is left alone. The remote replaces a file only if it still holds the one that was read
/// (``ReplaceableRemoteStorage``), so readers always see a whole file, old or new, which devices holding
/// both keys read alike. A file that cannot be rotated (a key missing, a file that does not decrypt, one
/// that changed meanwhile) is reported and left as it was; the others go on.
///
/// Safe to interrupt and to run again: a file rotated already is under the current key, and with a
/// `journal` the files done are not even downloaded again.
///
/// ```swift
/// let keys = StaticKeyProvider(keys: ["2026-05": old, "2026-11": new], current: "2026-11")
/// let remote = EncryptedRemoteStorage(wrapping: s3, keys: keys)
/// let report = try await KeyRotation.rotate(db: db, remote: remote)
/// print("\(report.rotated.count) re-encrypted, \(report.failed.count) left as they were")
/// ```
public enum KeyRotation {
    /// What a rotation did.
    public struct Report: Sendable {
        /// The attachments whose stored file was re-encrypted under the current key (or encrypted, from plain).
        public var rotated: [String]
        /// How many stored files were under the current key already (or done in an earlier run, by the
        /// journal).
        public var upToDate: Int
        /// The archived attachments whose stored file is not there (another device deleted it, say): the
        /// remote answered so twice (a download and a description). A file missing for an attachment that is
        /// not archived is in ``failed``.
        public var missing: [String]
        /// The attachments whose file could not be rotated, with why; each was left as it was.
        public var failed: [Failure]
        /// The key every rotated file is encrypted with now.
        public var keyId: String
        /// The attachments whose upload is not done yet: they may still be stored under an old key (a
        /// background upload is encrypted when it is handed over, and sent later), so the rotation is not
        /// complete until they are uploaded and a later run finds them under the current key.
        public var pendingUploads: [String] = []

        /// Whether every file the remote holds or will hold for this table's attachments is under the current
        /// key now (nothing failed, no upload pending): then the old keys are no longer needed for them.
        public var isComplete: Bool { failed.isEmpty && pendingUploads.isEmpty }
    }

    /// A file that could not be rotated.
    public struct Failure: Sendable, Hashable {
        /// The attachment.
        public var attachmentId: String
        /// Why (an ``AttachmentError``'s description: a key id, never a key).
        public var reason: String
        /// The error's code, when it was an ``AttachmentError``.
        public var code: AttachmentError.Code?
    }

    /// How many files are rotated at once.
    static let concurrency = 4

    /// Rotates the stored files of the attachments in `table` of `db` to `remote`'s current key.
    ///
    /// - Parameters:
    ///   - db: The app's database (``LocalDatabase/readOnly(path:configuration:)`` is enough: nothing in
    ///     it changes).
    ///   - remote: The app's encrypted remote; what it wraps must be a ``ReplaceableRemoteStorage``.
    ///   - table: The attachments table's name. The default is `attachments`.
    ///   - journal: A file where each attachment done is noted with the key id (created when missing), so
    ///     that a run after an interruption skips them. The default is `nil`: every file is downloaded and
    ///     looked at.
    ///   - workDirectory: Where each stored file is downloaded while it is rotated (ciphertext only: the
    ///     content is never written). The default is `nil`: the system's temporary folder.
    ///   - progress: Called after each attachment with how many are done and how many there are. The
    ///     default is `nil`.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/unsupported`` when the
    ///   wrapped remote cannot replace files, ``AttachmentError/Code-swift.struct/keyUnavailable`` when the
    ///   current key is missing, ``AttachmentError/Code-swift.struct/remoteNotFound`` when records claim
    ///   uploads and the remote's location does not exist; database and journal errors. A file's own failure
    ///   is reported in ``Report/failed``, not thrown.
    public static func rotate(
        db: LocalDatabase, remote: EncryptedRemoteStorage, table: String = "attachments", journal: URL? = nil,
        workDirectory: URL? = nil, progress: (@Sendable (_ done: Int, _ total: Int) -> Void)? = nil
    ) async throws -> Report {
        guard let base = remote.base as? any ReplaceableRemoteStorage else {
            throw AttachmentError(
                code: .unsupported,
                message:
                    "\(type(of: remote.base)) cannot replace a stored file (it is not a ReplaceableRemoteStorage), "
                    + "so its files cannot be re-encrypted")
        }
        let keyId = try await remote.keys.currentKeyId()
        guard let current = try await remote.keys.key(id: keyId) else {
            throw AttachmentError(
                code: .keyUnavailable,
                message: "the current encryption key \(String(reflecting: keyId)) is not among the keys given; "
                    + "nothing was rotated", name: keyId)
        }
        guard current.bitCount == 256 else {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "the encryption key \(String(reflecting: keyId)) is \(current.bitCount) bits, not 256",
                name: keyId)
        }
        let all = try await AttachmentStore.allRecords(of: db, table: table)
        let records = all.filter { $0.hasSynced && $0.state != .queuedDelete }.sorted { $0.id < $1.id }
        if !records.isEmpty { try await RemoteVerification.requireLocation(of: base) }
        let log = try journal.map { try RotationJournal(url: $0, keyId: keyId) }
        defer { log?.close() }
        let done = log?.done ?? []
        let work = workDirectory ?? FileManager.default.temporaryDirectory
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        let directory = URL(fileURLWithPath: "/", isDirectory: true)

        // An archived attachment's remote file may be gone for a good reason (another device deleted it).
        let archived = Set(records.filter { $0.state == .archived }.map(\.id))
        var report = Report(rotated: [], upToDate: 0, missing: [], failed: [], keyId: keyId)
        report.pendingUploads = all.filter { $0.state == .queuedUpload }.map(\.id).sorted()
        var finished = 0
        let pending = records.filter { !done.contains($0.id) }
        report.upToDate = records.count - pending.count
        progress?(report.upToDate, records.count)
        finished = report.upToDate
        try await withThrowingTaskGroup(of: (String, Result<EncryptedRemoteStorage.RotationOutcome, any Error>).self) {
            group in
            var next = pending.makeIterator()
            func startNext() {
                guard let record = next.next() else { return }
                let attachment = record.attachment(in: directory)
                group.addTask {
                    do {
                        return (record.id, .success(try await remote.rotate(attachment, on: base, work: work)))
                    } catch {
                        return (record.id, .failure(error))
                    }
                }
            }
            for _ in 0..<concurrency { startNext() }
            while let (id, result) = try await group.next() {
                switch result {
                case .success(.rotated):
                    report.rotated.append(id)
                    try log?.note(id)
                case .success(.upToDate):
                    report.upToDate += 1
                    try log?.note(id)
                case .success(.missing):
                    if archived.contains(id) {
                        report.missing.append(id)
                    } else {
                        // A file the remote should hold is gone: not something a rotation may call done.
                        report.failed.append(
                            Failure(
                                attachmentId: id,
                                reason: "remote storage holds no file for attachment \(String(reflecting: id)), "
                                    + "which it should (verify --remote reports it); nothing was rotated",
                                code: .remoteNotFound))
                    }
                case .failure(let error):
                    if error is CancellationError { throw error }
                    report.failed.append(
                        Failure(
                            attachmentId: id, reason: String(describing: error),
                            code: (error as? AttachmentError)?.code))
                }
                finished += 1
                progress?(finished, records.count)
                startNext()
            }
        }
        report.rotated.sort()
        report.missing.sort()
        report.failed.sort { $0.attachmentId < $1.attachmentId }
        return report
    }
}

/// The journal of a rotation: one line per attachment done, `{"key":…,"id":…}`, appended and flushed as each
/// is done. Lines of other keys (an earlier rotation) are ignored.
struct RotationJournal {
    let url: URL
    let keyId: String
    let done: Set<String>
    private let handle: FileHandle

    struct Line: Codable {
        var key: String
        var id: String
    }

    init(url: URL, keyId: String) throws {
        self.url = url
        self.keyId = keyId
        if !FileManager.default.fileExists(atPath: url.path) {
            guard
                FileManager.default.createFile(atPath: url.path, contents: nil, attributes: [.posixPermissions: 0o600])
            else {
                throw AttachmentError(
                    code: .fileSystem, message: "cannot create the rotation journal \(url.path)", path: url.path)
            }
        }
        let text = try String(contentsOf: url, encoding: .utf8)
        let decoder = JSONDecoder()
        // A line cut by a crash (the last one) is not a note: the file is rotated again, which is harmless.
        done = Set(
            text.split(separator: "\n").compactMap { try? decoder.decode(Line.self, from: Data($0.utf8)) }
                .filter { $0.key == keyId }.map(\.id))
        handle = try FileHandle(forWritingTo: url)
        try handle.seekToEnd()
        if let last = text.last, last != "\n" { try handle.write(contentsOf: Data("\n".utf8)) }
    }

    /// Notes `id` as done, flushed before it returns.
    func note(_ id: String) throws {
        var line = try JSONEncoder().encode(Line(key: keyId, id: id))
        line.append(0x0A)
        try handle.write(contentsOf: line)
        try handle.synchronize()
    }

    func close() {
        try? handle.close()
    }
}
