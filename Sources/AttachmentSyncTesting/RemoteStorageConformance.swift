import AttachmentSync
import Foundation

/// Checks that a `RemoteStorageAdapter` keeps the contract the queue relies on, against the real backend:
/// run it from your adapter's tests.
///
/// ``run(_:)`` performs each ``Check`` in turn and throws a ``Failure`` that names the check and says what
/// went wrong at the first violation:
/// - ``Check/roundTripEmpty``, ``Check/roundTripSmall`` and ``Check/roundTripLarge``: files of 0 bytes, 1 KiB
///   and ``Options/largeFileSize`` bytes come back byte for byte, uploaded and downloaded both with `Data`
///   and with the streaming methods, in every combination; a streaming transfer's last progress report counts
///   the whole file.
/// - ``Check/overwrite``: uploading the same content to an existing filename again succeeds (an upload
///   repeated after its answer was lost); other content either replaces the file entirely (with a shorter
///   one) or, for a create-only adapter, throws `AttachmentError` with code
///   `AttachmentError.Code.conflict` and leaves the first content as it was, never a mix.
///   With ``Options/requiresCreateOnly`` only the second is accepted (the library's adapters all are).
/// - ``Check/idempotentDelete``: deleting twice succeeds, and so does deleting a filename never uploaded;
///   a deleted file is gone.
/// - ``Check/notFound``: downloading a missing file, in memory or to a file, throws `AttachmentError` with
///   code `AttachmentError.Code.remoteNotFound`.
/// - ``Check/rangedRead``: when `RemoteStorageAdapter.supportsRangedDownloads` is `true`, a download
///   resumed from offsets between 0 and the file's size appends exactly the rest, and progress counts the
///   whole file. Skipped (passes) otherwise.
/// - ``Check/concurrentTransfers``: ``Options/concurrentFiles`` different files uploaded, downloaded and
///   deleted all at once come back intact.
/// - ``Check/objectInfo``: what `RemoteStorageAdapter.downloadFile(attachment:into:from:progress:)` reports
///   about a file (its size, the SHA-256 stored with it at upload from `Attachment.contentHash`) is true of
///   it; with ``Options/requiresStoredHash`` the SHA-256 must be reported, for files uploaded with `Data` and
///   streamed alike.
/// - ``Check/resumeAfterReplacement``: when ranged reads are supported, a download resumed after another
///   upload replaced the file never passes off a splice of the two versions: it ends as the new file, or it
///   reports the new file's SHA-256 so the queue rejects the splice.
/// - ``Check/listing``: when the adapter is a `ListableRemoteStorage`, uploaded files (one with spaces,
///   uppercase and non-ASCII letters in its name) are listed under `ListableRemoteStorage.storedName(forFilename:)`
///   with their sizes, every page included, and nothing the adapter keeps for itself is; `ListableRemoteStorage.fileInfo(attachment:)`
///   reports each file's size (and its stored SHA-256 when it reports one) and `nil` for a missing file;
///   `ListableRemoteStorage.storedSHA256(of:)` of a listed file is its content's SHA-256 or `nil` (`gc`
///   then keeps it), and not `nil` when stored hashes are required;
///   `ListableRemoteStorage.deleteListedFile(_:)` deletes a file (twice is fine) so that it is neither
///   listed nor downloadable. Skipped (passes) for other adapters.
///
/// Every check uses filenames of its own, starting with ``Options/filenamePrefix``, and deletes its files
/// when it ends, pass or fail. The adapter stays yours: create it before and shut it down after.
///
/// ```swift
/// @Test func myAdapterKeepsTheContract() async throws {
///     let storage = MyBackendStorage(baseURL: testServer)
///     try await RemoteStorageConformance(adapter: storage).run()
/// }
/// ```
public struct RemoteStorageConformance: Sendable {
    /// One property of the adapter contract.
    public enum Check: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
        /// A 0-byte file round trips.
        case roundTripEmpty
        /// A 1 KiB file round trips.
        case roundTripSmall
        /// A file of ``Options/largeFileSize`` bytes round trips.
        case roundTripLarge
        /// Uploading again keeps or replaces a file whole: never a mix, and the same content succeeds.
        case overwrite
        /// Deletes are idempotent.
        case idempotentDelete
        /// A missing file is `remoteNotFound`.
        case notFound
        /// Ranged reads append the rest of the file (when supported).
        case rangedRead
        /// Different files transfer concurrently.
        case concurrentTransfers
        /// The size and SHA-256 a download reports are the file's.
        case objectInfo
        /// A resumed download of a replaced file is never a silent splice.
        case resumeAfterReplacement
        /// Listing, describing and deleting listed files (when the adapter is a `ListableRemoteStorage`).
        case listing

        /// The check's name, `roundTripEmpty` say.
        public var description: String { rawValue }
    }

    /// Sizes and names the checks use.
    public struct Options: Sendable {
        /// The size of the large file, big enough to cross your adapter's multipart threshold. The default is
        /// 12 MiB.
        public var largeFileSize: Int = 12 * 1024 * 1024
        /// How many files ``Check/concurrentTransfers`` moves at once. The default is 8.
        public var concurrentFiles: Int = 8
        /// The size of each of those files. The default is 64 KiB.
        public var concurrentFileSize: Int = 64 * 1024
        /// Prepended to every filename the checks use, so runs never collide. The default is
        /// `conformance-` and a random 8-character suffix.
        public var filenamePrefix: String = "conformance-\(UUID().uuidString.prefix(8).lowercased())-"
        /// Whether ``Check/overwrite`` requires uploads to be create-only: other content under an existing
        /// filename throws `AttachmentError.Code.conflict` instead of replacing it (all of the
        /// library's adapters do). The default is `false`: replacing is accepted too.
        public var requiresCreateOnly: Bool = false
        /// Whether ``Check/objectInfo`` requires the adapter to return the SHA-256 stored with each file (all
        /// of the library's adapters do). The default is `false`: a reported hash must be right, but none is
        /// needed.
        public var requiresStoredHash: Bool = false
        /// Where local files are written; a folder of its own is created in it and removed afterwards. The
        /// default is the temporary folder.
        public var workingDirectory: URL = FileManager.default.temporaryDirectory

        /// Creates options with the defaults.
        public init() {}
    }

    /// A violation of the contract: which check, what happened, and the error the adapter threw, if any.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        /// The check that failed.
        public var check: Check
        /// What went wrong.
        public var message: String
        /// The error the adapter threw, when it threw one.
        public var underlying: (any Error)?

        /// Creates a failure.
        public init(check: Check, message: String, underlying: (any Error)? = nil) {
            self.check = check
            self.message = message
            self.underlying = underlying
        }

        /// `RemoteStorageConformance.<check>: <message> (<underlying error>)`.
        public var description: String {
            var text = "RemoteStorageConformance.\(check): \(message)"
            if let underlying { text += " (\(underlying))" }
            return text
        }
    }

    /// The adapter under test.
    public let adapter: any RemoteStorageAdapter
    /// The sizes and names used.
    public let options: Options

    /// Prepares a run against `adapter`.
    ///
    /// - Parameters:
    ///   - adapter: The adapter to check, connected to the backend it is meant for.
    ///   - options: Sizes and names. The default is ``Options/init()``.
    public init(adapter: any RemoteStorageAdapter, options: Options = Options()) {
        self.adapter = adapter
        self.options = options
    }

    /// Runs `checks` in order and throws at the first violation.
    ///
    /// - Parameter checks: The checks to run. The default is all of them.
    /// - Throws: ``Failure`` naming the check that failed.
    public func run(_ checks: [Check] = Check.allCases) async throws {
        let directory = options.workingDirectory.appendingPathComponent(
            "attachment-sync-conformance-\(UUID().uuidString)", isDirectory: true)
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw Failure(
                check: checks.first ?? .roundTripEmpty, message: "cannot create \(directory.path)", underlying: error)
        }
        defer { try? FileManager.default.removeItem(at: directory) }
        for check in checks {
            let context = Context(check: check, adapter: adapter, directory: directory, prefix: options.filenamePrefix)
            do {
                try await perform(check, context)
            } catch {
                await context.cleanUp()
                throw error
            }
            await context.cleanUp()
        }
    }

    private func perform(_ check: Check, _ context: Context) async throws {
        switch check {
        case .roundTripEmpty: try await context.roundTrip(size: 0)
        case .roundTripSmall: try await context.roundTrip(size: 1024)
        case .roundTripLarge: try await context.roundTrip(size: options.largeFileSize)
        case .overwrite: try await context.overwrite(requiringCreateOnly: options.requiresCreateOnly)
        case .idempotentDelete: try await context.idempotentDelete()
        case .notFound: try await context.notFound()
        case .rangedRead: try await context.rangedRead(size: max(2, min(options.largeFileSize, 3 * 1024 * 1024 + 7)))
        case .concurrentTransfers:
            try await context.concurrentTransfers(count: options.concurrentFiles, size: options.concurrentFileSize)
        case .objectInfo: try await context.objectInfo(requiringHash: options.requiresStoredHash)
        case .resumeAfterReplacement: try await context.resumeAfterReplacement(size: 256 * 1024)
        case .listing: try await context.listing(requiringHash: options.requiresStoredHash)
        }
    }
}

/// One check's state: its filenames (deleted at the end) and helpers that turn surprises into failures.
private final class Context: Sendable {
    let check: RemoteStorageConformance.Check
    let adapter: any RemoteStorageAdapter
    let directory: URL
    let prefix: String
    private let used = LockedValue<Set<String>>([])

    init(check: RemoteStorageConformance.Check, adapter: any RemoteStorageAdapter, directory: URL, prefix: String) {
        self.check = check
        self.adapter = adapter
        self.directory = directory
        self.prefix = prefix
    }

    // MARK: Checks

    func roundTrip(size: Int) async throws {
        let content = Self.bytes(count: size, seed: UInt64(size) &+ 1)
        let source = try writeLocal(content, name: "source")
        // (upload form, download form): every combination.
        for (upload, download) in [("Data", "Data"), ("Data", "stream"), ("stream", "Data"), ("stream", "stream")] {
            let file = attachment("\(upload)-\(download).bin")
            if upload == "Data" {
                try await step("upload \(size) bytes with uploadFile(data:)") {
                    try await adapter.uploadFile(data: content, attachment: file)
                }
            } else {
                let progress = ProgressLog()
                try await step("upload \(size) bytes with uploadFile(fileURL:)") {
                    try await adapter.uploadFile(fileURL: source, attachment: file, progress: progress.handler)
                }
                try progress.expectLast(Int64(size), check: check, what: "upload of \(size) bytes")
            }
            let received = try await downloaded(file, form: download, size: size)
            guard received == content else {
                throw fail(
                    "a \(size)-byte file uploaded with \(upload) came back with \(download) as \(received.count) "
                        + "bytes\(received.count == size ? " that differ" : "")")
            }
        }
    }

    func overwrite(requiringCreateOnly: Bool) async throws {
        let first = Self.bytes(count: 4096, seed: 1)
        let second = Self.bytes(count: 1000, seed: 2)
        let file = attachment("overwritten.bin")
        let firstFile = attachment("overwritten.bin", contentHash: FileStreaming.sha256(first))
        let secondFile = attachment("overwritten.bin", contentHash: FileStreaming.sha256(second))
        try await step("upload the first version") { try await adapter.uploadFile(data: first, attachment: firstFile) }
        try await step("upload the same content again") {
            try await adapter.uploadFile(data: first, attachment: firstFile)
        }
        var conflicted = false
        do {
            try await adapter.uploadFile(data: second, attachment: secondFile)
        } catch let error as AttachmentError where error.code == .conflict {
            conflicted = true
        } catch {
            throw fail("uploading other content to an existing filename threw", error)
        }
        if requiringCreateOnly, !conflicted {
            throw fail("uploading other content to an existing filename replaced it instead of throwing conflict")
        }
        let expected = conflicted ? first : second
        let received = try await downloaded(file, form: "Data", size: expected.count)
        guard received == expected else {
            throw fail(
                "after uploading other content the file holds \(received.count) bytes: neither the whole first "
                    + "version (\(first.count), kept on a conflict) nor the whole second (\(second.count))")
        }
    }

    func idempotentDelete() async throws {
        let file = attachment("deleted.bin")
        try await step("upload") { try await adapter.uploadFile(data: Data("delete me".utf8), attachment: file) }
        try await step("delete") { try await adapter.deleteFile(attachment: file) }
        try await step("delete a file already deleted") { try await adapter.deleteFile(attachment: file) }
        try await step("delete a file never uploaded") {
            try await adapter.deleteFile(attachment: attachment("never-uploaded.bin"))
        }
        try await expectNotFound(file, what: "download of a deleted file") {
            _ = try await self.adapter.downloadFile(attachment: file)
        }
    }

    func notFound() async throws {
        let file = attachment("missing.bin")
        try await expectNotFound(file, what: "downloadFile(attachment:) of a missing file") {
            _ = try await self.adapter.downloadFile(attachment: file)
        }
        let destination = directory.appendingPathComponent("\(check)-missing")
        try await expectNotFound(file, what: "downloadFile(attachment:to:) of a missing file") {
            try await self.adapter.downloadFile(attachment: file, to: destination) { _ in }
        }
    }

    func rangedRead(size: Int) async throws {
        guard adapter.supportsRangedDownloads else { return }
        let content = Self.bytes(count: size, seed: 99)
        let file = attachment("ranged.bin")
        try await step("upload \(size) bytes") { try await adapter.uploadFile(data: content, attachment: file) }
        for offset in [0, 1, size / 2, size - 1, size] {
            let partial = try writeLocal(content.prefix(offset), name: "partial-\(offset)")
            let progress = ProgressLog()
            try await step("resume a download at byte \(offset) of \(size)") {
                try await adapter.downloadFile(
                    attachment: file, appendingTo: partial, from: Int64(offset), progress: progress.handler)
            }
            let received = try readLocal(partial)
            guard received == content else {
                throw fail("a download resumed at byte \(offset) of \(size) left \(received.count) bytes that differ")
            }
            try progress.expectLast(Int64(size), check: check, what: "download resumed at byte \(offset)")
        }
    }

    func concurrentTransfers(count: Int, size: Int) async throws {
        let files = (0..<count).map {
            (attachment("concurrent-\($0).bin"), Self.bytes(count: size, seed: UInt64($0) + 1000))
        }
        let sources = try files.enumerated().map { try writeLocal($0.element.1, name: "concurrent-\($0.offset)") }
        try await step("upload \(count) files at once") {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, (file, _)) in files.enumerated() {
                    group.addTask {
                        try await self.adapter.uploadFile(fileURL: sources[index], attachment: file) { _ in }
                    }
                }
                try await group.waitForAll()
            }
        }
        let received = try await step("download \(count) files at once") {
            try await withThrowingTaskGroup(of: (Int, Data).self) { group in
                for (index, (file, _)) in files.enumerated() {
                    let destination = self.directory.appendingPathComponent("\(self.check)-received-\(index)")
                    group.addTask {
                        try await self.adapter.downloadFile(attachment: file, to: destination) { _ in }
                        return (index, try Data(contentsOf: destination))
                    }
                }
                return try await group.reduce(into: [Int: Data]()) { $0[$1.0] = $1.1 }
            }
        }
        for (index, (_, content)) in files.enumerated() where received[index] != content {
            throw fail("file \(index) of \(count) transferred concurrently came back different")
        }
        try await step("delete \(count) files at once") {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (file, _) in files {
                    group.addTask { try await self.adapter.deleteFile(attachment: file) }
                }
                try await group.waitForAll()
            }
        }
    }

    func objectInfo(requiringHash: Bool) async throws {
        let content = Self.bytes(count: 10_000, seed: 42)
        let source = try writeLocal(content, name: "source")
        let sha256 = FileStreaming.sha256(content)
        for form in ["Data", "stream"] {
            let file = attachment("info-\(form).bin", contentHash: sha256)
            if form == "Data" {
                try await step("upload with uploadFile(data:)") {
                    try await adapter.uploadFile(data: content, attachment: file)
                }
            } else {
                try await step("upload with uploadFile(fileURL:)") {
                    try await adapter.uploadFile(fileURL: source, attachment: file) { _ in }
                }
            }
            let destination = directory.appendingPathComponent("\(check)-\(form)-received")
            let info = try await step("download with downloadFile(attachment:into:from:)") {
                try await adapter.downloadFile(attachment: file, into: destination, from: 0) { _ in }
            }
            guard try readLocal(destination) == content else {
                throw fail("a file uploaded with \(form) came back from downloadFile(attachment:into:from:) different")
            }
            if let size = info.size, size != Int64(content.count) {
                throw fail("downloadFile(attachment:into:from:) reported \(size) bytes for a file of \(content.count)")
            }
            if let reported = info.sha256, reported.lowercased() != sha256 {
                throw fail("downloadFile(attachment:into:from:) reported SHA-256 \(reported) for a file of \(sha256)")
            }
            if requiringHash, info.sha256 == nil {
                throw fail("downloadFile(attachment:into:from:) reported no SHA-256 for a file uploaded with \(form)")
            }
            // The digest of what was written saves the queue a second read of the file: it must be exact.
            if let written = info.writtenSHA256,
                written.lowercased() != sha256 || info.writtenSize != Int64(content.count)
            {
                throw fail(
                    "downloadFile(attachment:into:from:) reported writing \(info.writtenSize.map(String.init) ?? "nil") "
                        + "bytes with SHA-256 \(written) into a file of \(content.count) bytes with SHA-256 \(sha256)")
            }
        }
    }

    func resumeAfterReplacement(size: Int) async throws {
        guard adapter.supportsRangedDownloads else { return }
        let first = Self.bytes(count: size, seed: 7)
        let second = Self.bytes(count: size, seed: 8)
        let file = attachment("replaced.bin", contentHash: FileStreaming.sha256(first))
        try await step("upload the first version") { try await adapter.uploadFile(data: first, attachment: file) }
        let destination = directory.appendingPathComponent("\(check)-partial")
        try await step("download the first version") {
            _ = try await adapter.downloadFile(attachment: file, into: destination, from: 0) { _ in }
        }
        // The download stopped halfway (what it keeps to resume, if anything, stays), then another device
        // replaced the file.
        do {
            let handle = try FileHandle(forWritingTo: destination)
            try handle.truncate(atOffset: UInt64(size / 2))
            try handle.close()
        } catch {
            throw fail("cannot cut \(destination.path) to half", error)
        }
        let replacement = attachment("replaced.bin", contentHash: FileStreaming.sha256(second))
        try await step("delete the first version and upload the second") {
            try await adapter.deleteFile(attachment: file)
            try await adapter.uploadFile(data: second, attachment: replacement)
        }
        let info = try await step("resume the download at byte \(size / 2)") {
            try await adapter.downloadFile(attachment: replacement, into: destination, from: Int64(size / 2)) { _ in }
        }
        let received = try readLocal(destination)
        if received == second { return }
        if let reported = info.sha256, reported.lowercased() == FileStreaming.sha256(second) { return }
        throw fail(
            "a download resumed after the file was replaced left \(received.count) bytes that are not the new file, "
                + "and reported no SHA-256 by which the queue could tell")
    }

    func listing(requiringHash: Bool) async throws {
        guard let adapter = adapter as? any ListableRemoteStorage else { return }
        let contents = [
            ("plain.bin", Self.bytes(count: 3_000, seed: 11)),
            ("Ünï Çode Photo.JPG", Self.bytes(count: 1_234, seed: 12)),
            ("empty.txt", Data()),
        ]
        var files: [(Attachment, Data)] = []
        for (name, content) in contents {
            let file = attachment(name, contentHash: FileStreaming.sha256(content))
            try await step("upload \(String(reflecting: file.filename))") {
                try await adapter.uploadFile(data: content, attachment: file)
            }
            files.append((file, content))
        }
        var listed = try await step("list every page with allFiles()") { try await adapter.allFiles() }
        if let own = listed.first(where: { $0.storedName.hasPrefix(".attachment-sync-") }) {
            throw fail(
                "the listing includes \(String(reflecting: own.storedName)), a file the adapter keeps for itself")
        }
        for (file, content) in files {
            let name = try await step("storedName(forFilename:) of \(String(reflecting: file.filename))") {
                try adapter.storedName(forFilename: file.filename)
            }
            let matches = listed.filter { $0.storedName.utf8.elementsEqual(name.utf8) }
            guard matches.count == 1, let match = matches.first else {
                throw fail(
                    "the listing has \(matches.count) entries named \(String(reflecting: name)) for an uploaded file")
            }
            guard match.size == Int64(content.count) else {
                throw fail("the listing gives \(String(reflecting: name)) \(match.size) bytes, not \(content.count)")
            }
            if let filename = match.filename, !filename.utf8.elementsEqual(file.filename.utf8) {
                throw fail("the listing maps \(String(reflecting: name)) back to \(String(reflecting: filename))")
            }
            if let modified = match.lastModified, abs(modified.timeIntervalSinceNow) > 86_400 {
                throw fail("the listing says \(String(reflecting: name)) was last written at \(modified)")
            }
            let info = try await step("fileInfo(attachment:) of \(String(reflecting: file.filename))") {
                try await adapter.fileInfo(attachment: file)
            }
            guard let info else { throw fail("fileInfo(attachment:) says an uploaded file does not exist") }
            if let size = info.size, size != Int64(content.count) {
                throw fail("fileInfo(attachment:) reports \(size) bytes for a file of \(content.count)")
            }
            if let reported = info.sha256, reported.lowercased() != FileStreaming.sha256(content) {
                throw fail(
                    "fileInfo(attachment:) reports SHA-256 \(reported) for a file of \(FileStreaming.sha256(content))")
            }
            if requiringHash, info.sha256 == nil {
                throw fail("fileInfo(attachment:) reports no SHA-256 for a file uploaded with one")
            }
            // gc deletes only files whose stored hash proves the library wrote them.
            let proof = try await step("storedSHA256(of:) of the listed \(String(reflecting: name))") {
                try await adapter.storedSHA256(of: match)
            }
            if let proof, proof != FileStreaming.sha256(content) {
                throw fail("storedSHA256(of:) reports \(proof) for a file of \(FileStreaming.sha256(content))")
            }
            if requiringHash, proof == nil {
                throw fail("storedSHA256(of:) finds no stored SHA-256 on a listed file uploaded with one")
            }
        }
        let missing = attachment("never-uploaded.bin")
        if try await step(
            "fileInfo(attachment:) of a missing file", { try await adapter.fileInfo(attachment: missing) })
            != nil
        {
            throw fail("fileInfo(attachment:) describes a file that was never uploaded")
        }
        let (deleted, _) = files[1]
        let name = try adapter.storedName(forFilename: deleted.filename)
        guard let entry = listed.first(where: { $0.storedName.utf8.elementsEqual(name.utf8) }) else { return }
        for attempt in ["delete", "delete again"] {
            try await step("\(attempt) the listed file \(String(reflecting: name))") {
                try await adapter.deleteListedFile(entry)
            }
        }
        listed = try await step("list after deleting") { try await adapter.allFiles() }
        if listed.contains(where: { $0.storedName.utf8.elementsEqual(name.utf8) }) {
            throw fail("a file deleted with deleteListedFile(_:) is still listed")
        }
        for (file, _) in files where file.filename != deleted.filename {
            let other = try adapter.storedName(forFilename: file.filename)
            guard listed.contains(where: { $0.storedName.utf8.elementsEqual(other.utf8) }) else {
                throw fail("deleting one listed file removed \(String(reflecting: other)) too")
            }
        }
        if try await step(
            "fileInfo(attachment:) of the deleted file", { try await adapter.fileInfo(attachment: deleted) })
            != nil
        {
            throw fail("fileInfo(attachment:) describes a file deleted with deleteListedFile(_:)")
        }
        try await expectNotFound(deleted, what: "downloading a file deleted with deleteListedFile(_:)") {
            _ = try await adapter.downloadFile(attachment: deleted)
        }
    }

    // MARK: Helpers

    func attachment(_ name: String, contentHash: String? = nil) -> Attachment {
        let filename = "\(prefix)\(check)-\(name)"
        used.withLock { _ = $0.insert(filename) }
        return Attachment(
            id: UUID().uuidString.lowercased(), filename: filename, state: .synced,
            mediaType: "application/octet-stream", contentHash: contentHash)
    }

    /// Deletes every file this check used, ignoring failures.
    func cleanUp() async {
        for filename in used.withLock({ $0 }) {
            try? await adapter.deleteFile(attachment: Attachment(id: "cleanup", filename: filename, state: .synced))
        }
    }

    func fail(_ message: String, _ underlying: (any Error)? = nil) -> RemoteStorageConformance.Failure {
        RemoteStorageConformance.Failure(check: check, message: message, underlying: underlying)
    }

    /// Runs an adapter call, turning what it throws into a failure that says what was being done.
    @discardableResult
    func step<T>(_ what: String, _ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let failure as RemoteStorageConformance.Failure {
            throw failure
        } catch {
            throw fail("\(what) threw", error)
        }
    }

    func downloaded(_ file: Attachment, form: String, size: Int) async throws -> Data {
        if form == "Data" {
            return try await step("download \(size) bytes with downloadFile(attachment:)") {
                try await adapter.downloadFile(attachment: file)
            }
        }
        let destination = directory.appendingPathComponent("\(check)-\(UUID().uuidString)")
        let progress = ProgressLog()
        try await step("download \(size) bytes with downloadFile(attachment:to:)") {
            try await adapter.downloadFile(attachment: file, to: destination, progress: progress.handler)
        }
        try progress.expectLast(Int64(size), check: check, what: "download of \(size) bytes")
        return try readLocal(destination)
    }

    func expectNotFound(_ file: Attachment, what: String, _ body: @Sendable () async throws -> Void) async throws {
        do {
            try await body()
        } catch let error as AttachmentError where error.code == .remoteNotFound {
            return
        } catch {
            throw fail("\(what) threw \(type(of: error)), not AttachmentError with code remoteNotFound", error)
        }
        throw fail("\(what) succeeded instead of throwing AttachmentError with code remoteNotFound")
    }

    func writeLocal(_ data: Data, name: String) throws -> URL {
        let url = directory.appendingPathComponent("\(check)-\(name)")
        do {
            try data.write(to: url)
        } catch {
            throw fail("cannot write the local file \(url.path)", error)
        }
        return url
    }

    func readLocal(_ url: URL) throws -> Data {
        do {
            return try Data(contentsOf: url)
        } catch {
            throw fail("cannot read the downloaded file \(url.path)", error)
        }
    }

    /// Deterministic bytes from a seed (a SplitMix64 stream), so misplaced ranges show.
    static func bytes(count: Int, seed: UInt64) -> Data {
        var state = seed
        var bytes = [UInt8]()
        bytes.reserveCapacity(count)
        while bytes.count < count {
            state &+= 0x9E37_79B9_7F4A_7C15
            var value = state
            value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
            value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
            value ^= value >> 31
            for shift in stride(from: 0, to: 64, by: 8) where bytes.count < count {
                bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
            }
        }
        return Data(bytes)
    }
}

/// The progress reports of one transfer.
private final class ProgressLog: Sendable {
    private let last = LockedValue<TransferProgress?>(nil)

    var handler: TransferProgressHandler {
        { progress in self.last.withLock { $0 = progress } }
    }

    /// Fails unless the last report (if there was one) counts `size` bytes done.
    func expectLast(_ size: Int64, check: RemoteStorageConformance.Check, what: String) throws {
        guard let report = last.withLock({ $0 }) else { return }
        guard report.completedBytes == size else {
            throw RemoteStorageConformance.Failure(
                check: check, message: "the last progress report of the \(what) counts \(report.completedBytes) bytes")
        }
    }
}
