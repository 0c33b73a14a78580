import AttachmentSync
import Foundation

/// A `RemoteStorageAdapter` that keeps files in memory, for tests: with optional latency, injected
/// failures, transfers that can be held mid-flight, and a record of every call.
///
/// Files are keyed by `Attachment.filename` and follow the adapter contract: an upload stores or
/// overwrites, a download of a missing file throws `AttachmentError` with code
/// `AttachmentError.Code.remoteNotFound`, and a delete of a missing file succeeds.
///
/// Every call goes through the same steps, in this order:
/// 1. It is counted (``uploadCount``, ``downloadCount`` or ``deleteCount``), logged in ``callLog`` and
///    marked in flight (``inFlightCount``, ``maxConcurrentCalls``). A failure injected with
///    ``failNext(_:count:with:)`` or ``setAlwaysFailing(_:with:)`` is chosen for it now.
/// 2. It sleeps the configured latency on the configured clock.
/// 3. While the storage is held (``hold()``), it parks until ``release()``.
/// 4. It throws its injected failure, if one was chosen, leaving the stored files unchanged; otherwise it
///    does its work. Either way it stops counting as in flight.
///
/// Cancelling the calling task during steps 2 or 3 makes the call throw `CancellationError` promptly,
/// without touching the stored files.
///
/// ```swift
/// let storage = InMemoryRemoteStorage()
/// let photo = Attachment(id: "a", filename: "a.jpg", state: .queuedUpload)
/// try await storage.uploadFile(data: Data("jpeg".utf8), attachment: photo)
/// #expect(await storage.file(named: "a.jpg") == Data("jpeg".utf8))
///
/// await storage.failNext(.download, with: InMemoryRemoteStorage.offlineError)
/// await #expect(throws: URLError.self) { try await storage.downloadFile(attachment: photo) }
/// ```
///
/// In a test file that imports `Testing`, write `AttachmentSync.Attachment` for the attachment type:
/// Swift Testing has an `Attachment` type of its own.
public actor InMemoryRemoteStorage: RemoteStorageAdapter {
    /// One of the three adapter operations.
    ///
    /// ```swift
    /// await storage.failNext(.download, with: InjectedFailure())
    /// ```
    public enum Operation: Sendable, Hashable, CaseIterable, CustomStringConvertible {
        /// `RemoteStorageAdapter.uploadFile(data:attachment:)`.
        case upload
        /// `RemoteStorageAdapter.downloadFile(attachment:)`.
        case download
        /// `RemoteStorageAdapter.deleteFile(attachment:)`.
        case delete

        /// The operation's name: `upload`, `download` or `delete`.
        ///
        /// ```swift
        /// #expect(InMemoryRemoteStorage.Operation.upload.description == "upload")
        /// ```
        public var description: String {
            switch self {
            case .upload: "upload"
            case .download: "download"
            case .delete: "delete"
            }
        }
    }

    /// A call made to the storage, as recorded in ``InMemoryRemoteStorage/callLog``.
    ///
    /// ```swift
    /// #expect(await storage.callLog == [.init(operation: .upload, filename: "a.jpg")])
    /// ```
    public struct Call: Sendable, Hashable, CustomStringConvertible {
        /// Which operation was called.
        public var operation: Operation
        /// The `Attachment.filename` of the attachment it was called with.
        public var filename: String

        /// Creates a record of a call, usually to compare with ``InMemoryRemoteStorage/callLog``.
        ///
        /// ```swift
        /// let expected = InMemoryRemoteStorage.Call(operation: .download, filename: "a.jpg")
        /// ```
        ///
        /// - Parameters:
        ///   - operation: Which operation was called.
        ///   - filename: The filename of the attachment it was called with.
        public init(operation: Operation, filename: String) {
            self.operation = operation
            self.filename = filename
        }

        /// The operation and the filename, such as `upload a.jpg`, for test output.
        ///
        /// ```swift
        /// #expect(InMemoryRemoteStorage.Call(operation: .delete, filename: "b.png").description == "delete b.png")
        /// ```
        public var description: String {
            "\(operation) \(filename)"
        }
    }

    /// A failure injected with ``InMemoryRemoteStorage/failNext(_:count:with:)`` that has calls left.
    private struct OneShotFailure {
        var operation: Operation?
        var remaining: Int
        var error: any Error
    }

    /// A task suspended until a condition on the counters holds (``waitForInFlight(count:)`` and the other
    /// waits).
    private struct InFlightWaiter {
        var isSatisfied: @Sendable (Counters) -> Bool
        var continuation: CheckedContinuation<Void, Never>
    }

    /// The counters a waiter's condition reads.
    private struct Counters {
        var uploads: Int
        var downloads: Int
        var deletes: Int
        var inFlight: Int
    }

    private var counters: Counters {
        Counters(uploads: uploadCount, downloads: downloadCount, deletes: deleteCount, inFlight: inFlightCount)
    }

    /// The error of a device without a network connection: `URLError(.notConnectedToInternet)`, for
    /// ``failNext(_:count:with:)`` and ``setAlwaysFailing(_:with:)`` when the code under test treats
    /// being offline differently from other failures.
    ///
    /// ```swift
    /// await storage.setAlwaysFailing(with: InMemoryRemoteStorage.offlineError)
    /// ```
    public static var offlineError: URLError {
        URLError(.notConnectedToInternet)
    }

    private let latency: Duration
    private let clock: any Clock<Duration>

    /// A filename by its bytes, as an object store keys objects: Swift's `==` would merge names that differ
    /// only in their Unicode form (`"é"` composed or not), which S3 keeps apart.
    private struct Key: Hashable {
        let bytes: [UInt8]
        let name: String
        init(_ name: String) {
            self.name = name
            bytes = Array(name.utf8)
        }
        static func == (lhs: Key, rhs: Key) -> Bool { lhs.bytes == rhs.bytes }
        func hash(into hasher: inout Hasher) { hasher.combine(bytes) }
    }

    private var storedFiles: [Key: Data] = [:]
    /// The SHA-256 stored with each file at upload (`Attachment.contentHash`), like an object's metadata.
    private var storedHashes: [Key: String] = [:]
    private var oneShotFailures: [OneShotFailure] = []
    private var permanentFailures: [Operation: any Error] = [:]
    private var lastID: UInt64 = 0

    /// The tasks suspended in the storage, by id: the continuations a cancellation must find.
    private struct Suspended {
        /// Calls parked by ``hold()``; ids grow with each call, so sorting them gives arrival order.
        var parkedCalls: [UInt64: CheckedContinuation<Void, any Error>] = [:]
        var inFlightWaiters: [UInt64: InFlightWaiter] = [:]
    }

    /// Behind a lock rather than isolated to the actor, so that a task's cancellation handler, which runs
    /// synchronously on whichever thread cancels it, resumes the task itself: a handler that had to start a
    /// task to reach the actor would leave the cancelled task suspended until the scheduler ran that task,
    /// which on a busy cooperative pool took up to a minute.
    private nonisolated let suspended = LockedValue(Suspended())
    private var downloadHoldOffset: Int64?
    private var passedHold = false
    private var heldDownloads = 0
    private var heldDownloadWaiters: [CheckedContinuation<Void, Never>] = []

    /// The chunk size of streaming downloads: 64 KiB.
    public nonisolated let chunkSize = 64 * 1024

    /// Bytes written by the streaming and ranged downloads, in all: a resumed download adds only the rest.
    public private(set) var bytesServed: Int64 = 0

    /// The number of `RemoteStorageAdapter.uploadFile(data:attachment:)` calls made, including those
    /// that failed or were cancelled.
    ///
    /// ```swift
    /// #expect(await storage.uploadCount == 1)
    /// ```
    public private(set) var uploadCount = 0

    /// The number of `RemoteStorageAdapter.downloadFile(attachment:)` calls made, including those that
    /// failed or were cancelled.
    ///
    /// ```swift
    /// #expect(await storage.downloadCount == 0)
    /// ```
    public private(set) var downloadCount = 0

    /// The number of `RemoteStorageAdapter.deleteFile(attachment:)` calls made, including those that
    /// failed or were cancelled.
    ///
    /// ```swift
    /// #expect(await storage.deleteCount == 2)
    /// ```
    public private(set) var deleteCount = 0

    /// Every call made, in the order the calls reached the storage, including those that failed or were
    /// cancelled.
    ///
    /// ```swift
    /// #expect(await storage.callLog.map(\.operation) == [.upload, .download])
    /// ```
    public private(set) var callLog: [Call] = []

    /// The number of calls that have started and not yet returned or thrown: sleeping their latency,
    /// parked by ``hold()``, or about to finish.
    ///
    /// ```swift
    /// await storage.waitForInFlight(count: 2)
    /// #expect(await storage.inFlightCount == 2)
    /// ```
    public private(set) var inFlightCount = 0

    /// The highest ``inFlightCount`` seen so far: how many calls the code under test ran at once.
    ///
    /// Calls only overlap when they suspend, so give them a latency or ``hold()`` the storage to measure
    /// concurrency.
    ///
    /// ```swift
    /// #expect(await storage.maxConcurrentCalls <= 2)
    /// ```
    public private(set) var maxConcurrentCalls = 0

    /// Whether calls are being parked: `true` between ``hold()`` and ``release()``.
    ///
    /// ```swift
    /// await storage.hold()
    /// #expect(await storage.isHolding)
    /// ```
    public private(set) var isHolding = false

    /// Creates an empty storage.
    ///
    /// ```swift
    /// let clock = ManualClock()
    /// let slowStorage = InMemoryRemoteStorage(latency: .milliseconds(200), clock: clock)
    /// ```
    ///
    /// - Parameters:
    ///   - latency: How long every call sleeps on `clock` before doing its work; zero skips the sleep. The
    ///     default is `.zero`.
    ///   - clock: The clock the latency is slept on; pass a ``ManualClock`` to decide in the test when
    ///     calls complete. The default is a `ContinuousClock`.
    public init(latency: Duration = .zero, clock: any Clock<Duration> = ContinuousClock()) {
        self.latency = latency
        self.clock = clock
    }

    // MARK: - RemoteStorageAdapter

    /// Stores `data` as the file named `Attachment.filename`, replacing any file of that name.
    ///
    /// ```swift
    /// try await storage.uploadFile(data: Data([1, 2]), attachment: attachment)
    /// ```
    ///
    /// - Parameters:
    ///   - data: The file's contents.
    ///   - attachment: The attachment; only its filename is used.
    /// - Throws: An injected failure, or `CancellationError` when cancelled during latency or a hold. The
    ///   stored files are unchanged when it throws.
    public func uploadFile(data: Data, attachment: Attachment) async throws {
        let failure = beginCall(.upload, filename: attachment.filename)
        defer { endCall() }
        try await prepare(failure: failure)
        try await takeBandwidth(data.count)
        if isCreateOnly, let existing = storedFiles[Key(attachment.filename)] {
            guard existing == data else {
                throw AttachmentError(
                    code: .conflict,
                    message: "Remote storage holds other content as '\(attachment.filename)'; nothing was replaced",
                    attachmentId: attachment.id, name: attachment.filename)
            }
            return
        }
        // A copy of the bytes the remote owns, as a server's would be: the `Data` may be a mapping of the
        // local file (the default `uploadFile(fileURL:…)`), which must not change what the remote holds.
        storedFiles[Key(attachment.filename)] = data.withUnsafeBytes { bytes in
            bytes.baseAddress.map { Data(bytes: $0, count: bytes.count) } ?? Data()
        }
        storedHashes[Key(attachment.filename)] = attachment.contentHash
    }

    /// Whether uploads are create-only, as the library's real adapters are: other content under an existing
    /// filename throws `AttachmentError` with code `AttachmentError.Code.conflict` and is
    /// not replaced; the same content succeeds. The default is `false`: uploads replace, as the PowerSync
    /// docs' simplest adapters do.
    public private(set) var isCreateOnly = false

    /// Makes uploads create-only (see ``isCreateOnly``), or replacing again.
    ///
    /// ```swift
    /// await storage.setCreateOnly(true)
    /// ```
    public func setCreateOnly(_ createOnly: Bool) {
        isCreateOnly = createOnly
    }

    /// Returns the file named `Attachment.filename`.
    ///
    /// ```swift
    /// let data = try await storage.downloadFile(attachment: attachment)
    /// ```
    ///
    /// - Parameter attachment: The attachment; its filename is looked up, and its id goes into the error.
    /// - Returns: The file's contents.
    /// - Throws: `AttachmentError` with code `AttachmentError.Code.remoteNotFound` (and
    ///   the attachment's id and filename) when there is no such file; an injected failure; or
    ///   `CancellationError` when cancelled during latency or a hold.
    public func downloadFile(attachment: Attachment) async throws -> Data {
        let failure = beginCall(.download, filename: attachment.filename)
        defer { endCall() }
        try await prepare(failure: failure)
        let data = try storedFile(for: attachment)
        try await takeBandwidth(data.count)
        return data
    }

    /// Waits, chunk by chunk, until the queue's bandwidth cap (``BandwidthThrottle/current``) lets `count`
    /// bytes through, as a real transfer would.
    private func takeBandwidth(_ count: Int) async throws {
        guard let throttle = BandwidthThrottle.current else { return }
        var taken = 0
        while taken < count {
            let chunk = min(chunkSize, count - taken)
            try await throttle.take(chunk)
            taken += chunk
        }
    }

    /// Deletes the file named `Attachment.filename`; succeeds when there is no such file.
    ///
    /// ```swift
    /// try await storage.deleteFile(attachment: attachment)
    /// try await storage.deleteFile(attachment: attachment)  // still fine
    /// ```
    ///
    /// - Parameter attachment: The attachment; only its filename is used.
    /// - Throws: An injected failure, or `CancellationError` when cancelled during latency or a hold. The
    ///   stored files are unchanged when it throws.
    public func deleteFile(attachment: Attachment) async throws {
        let failure = beginCall(.delete, filename: attachment.filename)
        defer { endCall() }
        try await prepare(failure: failure)
        storedFiles[Key(attachment.filename)] = nil
        storedHashes[Key(attachment.filename)] = nil
    }

    // MARK: - Streaming and ranged downloads

    /// `true`: downloads can resume from an offset.
    public nonisolated var supportsRangedDownloads: Bool { true }

    /// Writes the file named `Attachment.filename` to `destination` (created or replaced) in chunks of
    /// ``chunkSize`` bytes, reporting progress, and counting what it serves in ``bytesServed``.
    ///
    /// A download passes ``holdDownloads(atByte:)``'s offset only after ``release()``.
    ///
    /// - Throws: As ``downloadFile(attachment:)``; also `CancellationError` when cancelled while held mid-file,
    ///   leaving the bytes written so far in `destination`.
    public func downloadFile(
        attachment: Attachment, to destination: URL, progress: @escaping TransferProgressHandler
    ) async throws {
        // As the HTTP adapters do: a wrapper following the file hears of the new start before it is cut.
        DownloadTap.current?.startedOver()
        try createEmptyFile(at: destination)
        try await downloadFile(attachment: attachment, appendingTo: destination, from: 0, progress: progress)
    }

    /// Appends the file's bytes from `offset` on to `destination`, in chunks, as
    /// ``downloadFile(attachment:to:progress:)`` does; counts one download call and the bytes it serves.
    public func downloadFile(
        attachment: Attachment, appendingTo destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws {
        let failure = beginCall(.download, filename: attachment.filename)
        defer { endCall() }
        try await prepare(failure: failure)
        let data = try storedFile(for: attachment)
        let handle = try FileHandle(forWritingTo: destination)
        defer { try? handle.close() }
        try handle.seekToEnd()
        let total = Int64(data.count)
        var position = min(max(offset, 0), total)
        // A wrapper following the file (EncryptedRemoteStorage) is told how far it is written, as the HTTP
        // adapters tell it.
        let tap = DownloadTap.current
        progress(TransferProgress(completedBytes: position, totalBytes: total))
        while position < total {
            if let holdOffset = downloadHoldOffset, position >= holdOffset, !passedHold {
                heldDownloads += 1
                defer { heldDownloads -= 1 }
                wakeHeldDownloadWaiters()
                try await park()
                passedHold = true
            }
            try Task.checkCancellation()
            var end = min(position + Int64(chunkSize), total)
            if let holdOffset = downloadHoldOffset, !passedHold, position < holdOffset { end = min(end, holdOffset) }
            try await BandwidthThrottle.current?.take(Int(end - position))
            try handle.write(contentsOf: data[Int(position)..<Int(end)])
            bytesServed += end - position
            position = end
            tap?.written(upTo: position)
            progress(TransferProgress(completedBytes: position, totalBytes: total))
            await Task.yield()
        }
        try handle.synchronize()
    }

    /// Downloads like ``downloadFile(attachment:to:progress:)`` (from 0) or
    /// ``downloadFile(attachment:appendingTo:from:progress:)`` (from `offset`), and returns the stored file's
    /// size and the SHA-256 stored with it at upload, as an object store returns its metadata.
    public func downloadFile(
        attachment: Attachment, into destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws -> RemoteObjectInfo {
        try await downloadWholeOrRest(of: attachment, into: destination, from: offset, progress: progress)
        let name = attachment.filename
        return RemoteObjectInfo(size: storedFiles[Key(name)].map { Int64($0.count) }, sha256: storedHashes[Key(name)])
    }

    /// Makes downloads stop at byte `offset` of the file until ``release()`` (which lets every later
    /// download through too), like a connection that stalls; `nil` stops holding. Lets a test interrupt a
    /// download midway.
    ///
    /// ```swift
    /// await storage.holdDownloads(atByte: 100_000)
    /// let download = Task { try await queue.download(attachmentId: id) }
    /// await storage.waitForHeldDownload()
    /// download.cancel()  // 100,000 bytes stay in the partial file
    /// ```
    public func holdDownloads(atByte offset: Int64?) {
        downloadHoldOffset = offset
        passedHold = false
    }

    /// Returns once a download is held at ``holdDownloads(atByte:)``'s offset (at once if one is).
    public func waitForHeldDownload() async {
        guard heldDownloads == 0 else { return }
        await withCheckedContinuation { heldDownloadWaiters.append($0) }
    }

    private func wakeHeldDownloadWaiters() {
        let waiters = heldDownloadWaiters
        heldDownloadWaiters = []
        for waiter in waiters { waiter.resume() }
    }

    /// The stored file named `Attachment.filename`, or `AttachmentError.Code.remoteNotFound`.
    private func storedFile(for attachment: Attachment) throws -> Data {
        guard let data = storedFiles[Key(attachment.filename)] else {
            throw AttachmentError(
                code: .remoteNotFound,
                message: "Remote storage has no file named '\(attachment.filename)'",
                attachmentId: attachment.id,
                name: attachment.filename
            )
        }
        return data
    }

    private func createEmptyFile(at url: URL) throws {
        try FileManager.default.createDirectory(
            at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data().write(to: url)
    }

    // MARK: - Inspecting and seeding files

    /// All stored files, by filename.
    ///
    /// ```swift
    /// #expect(await storage.files.keys.sorted() == ["a.jpg", "b.jpg"])
    /// ```
    public var files: [String: Data] {
        Dictionary(storedFiles.map { ($0.key.name, $0.value) }, uniquingKeysWith: { first, _ in first })
    }

    /// The stored file named `name`, or `nil` when there is none.
    ///
    /// ```swift
    /// #expect(await storage.file(named: "a.jpg") == Data("jpeg".utf8))
    /// ```
    ///
    /// - Parameter name: A filename.
    /// - Returns: The file's contents, or `nil`.
    public func file(named name: String) -> Data? {
        storedFiles[Key(name)]
    }

    /// Stores a file directly, as if another device had uploaded it: no call is counted or logged, and no
    /// latency, hold or failure applies.
    ///
    /// ```swift
    /// await storage.setFile(Data("from another phone".utf8), named: "b.jpg")
    /// ```
    ///
    /// - Parameters:
    ///   - data: The file's contents.
    ///   - name: The filename to store it under, replacing any file of that name.
    public func setFile(_ data: Data, named name: String) {
        storedFiles[Key(name)] = data
        storedHashes[Key(name)] = nil
    }

    /// Stores a file directly with the SHA-256 an uploading device would have stored with it, as if another
    /// device had uploaded it; like ``setFile(_:named:)``, no call is counted or logged.
    ///
    /// ```swift
    /// await storage.setFile(photo, named: "b.jpg", sha256: hexSHA256(of: photo))
    /// ```
    public func setFile(_ data: Data, named name: String, sha256: String?) {
        storedFiles[Key(name)] = data
        storedHashes[Key(name)] = sha256
    }

    /// The SHA-256 stored with the file named `name` at upload, or `nil` when none was (or there is no file).
    public func storedSHA256(named name: String) -> String? {
        storedHashes[Key(name)]
    }

    /// Removes a file directly, as if another device had deleted it: no call is counted or logged. Does
    /// nothing when there is no such file.
    ///
    /// ```swift
    /// await storage.removeFile(named: "b.jpg")
    /// ```
    ///
    /// - Parameter name: The filename to remove.
    public func removeFile(named name: String) {
        storedFiles[Key(name)] = nil
        storedHashes[Key(name)] = nil
    }

    // MARK: - Injecting failures

    /// The overload answer given to calls above a number in flight (see ``throttle(above:with:)``).
    private var throttle: (limit: Int, error: any Error)?

    /// What an overloaded server answers: `AttachmentError` with code
    /// `AttachmentError.Code.remoteUnavailable` and a `RemoteOverloadSignal` (as a 503
    /// SlowDown) as its underlying error. ``throttle(above:with:)`` uses it by default.
    public static var overloadedError: AttachmentError {
        AttachmentError(
            code: .remoteUnavailable, message: "the remote is overloaded (SlowDown)", underlying: Overloaded())
    }

    /// The underlying error of ``overloadedError``.
    public struct Overloaded: RemoteOverloadSignal, CustomStringConvertible {
        /// `true`.
        public var isOverload: Bool { true }
        /// `503 SlowDown`.
        public var description: String { "503 SlowDown" }
        /// Creates the signal.
        public init() {}
    }

    /// How many calls were refused by ``throttle(above:with:)``.
    ///
    /// ```swift
    /// #expect(await storage.refusedCount < 20)
    /// ```
    public private(set) var refusedCount = 0

    /// Refuses every call that starts while more than `limit` calls (itself included) are in flight, with
    /// `error`, like a server that answers 429 or 503 SlowDown when overloaded; `nil` stops it. Refused calls
    /// are counted in ``refusedCount`` and change no file; they still sleep the latency and wait out a hold.
    ///
    /// ```swift
    /// await storage.throttle(above: 4, with: AttachmentError(code: .remoteUnavailable, message: "SlowDown"))
    /// ```
    public func throttle(above limit: Int?, with error: any Error = InMemoryRemoteStorage.overloadedError) {
        throttle = limit.map { ($0, error) }
    }

    /// Makes the next `count` calls of `operation` (of any operation when `nil`) throw `error`, without
    /// changing the stored files.
    ///
    /// A call takes its failure when it starts (so calls already in flight are not affected), still sleeps
    /// its latency and waits out a hold, then throws. Failures injected by several `failNext` calls are
    /// used in the order they were injected: a call takes the oldest one that applies to its operation.
    /// One-shot failures are used before a failure set with ``setAlwaysFailing(_:with:)``. A `count` of
    /// zero or less injects nothing.
    ///
    /// ```swift
    /// await storage.failNext(.upload, count: 2, with: InjectedFailure("503"))
    /// // the next two uploads throw InjectedFailure("503"); the third succeeds
    /// ```
    ///
    /// - Parameters:
    ///   - operation: The operation to fail, or `nil` for whichever calls come next. The default is `nil`.
    ///   - count: How many calls to fail. The default is `1`.
    ///   - error: The error those calls throw; ``InjectedFailure`` and ``offlineError`` are handy.
    public func failNext(_ operation: Operation? = nil, count: Int = 1, with error: any Error) {
        guard count > 0 else { return }
        oneShotFailures.append(OneShotFailure(operation: operation, remaining: count, error: error))
    }

    /// Makes every call of `operation` (of every operation when `nil`) throw `error` from now on, or stops
    /// that when `error` is `nil`.
    ///
    /// `setAlwaysFailing(.upload, with: nil)` stops failing uploads only; `setAlwaysFailing(with: nil)`
    /// stops failing every operation. Calls already in flight are not affected, and failures injected with
    /// ``failNext(_:count:with:)`` are used first.
    ///
    /// ```swift
    /// await storage.setAlwaysFailing(with: InMemoryRemoteStorage.offlineError)  // the device goes offline
    /// // … every call throws …
    /// await storage.setAlwaysFailing(with: nil)  // back online
    /// ```
    ///
    /// - Parameters:
    ///   - operation: The operation to fail, or `nil` for all of them. The default is `nil`.
    ///   - error: The error to throw, or `nil` to stop failing.
    public func setAlwaysFailing(_ operation: Operation? = nil, with error: (any Error)?) {
        for affected in operation.map({ [$0] }) ?? Operation.allCases {
            permanentFailures[affected] = error
        }
    }

    // MARK: - Holding calls mid-flight

    /// Makes calls park once they have been counted, marked in flight and have slept their latency, until
    /// ``release()``.
    ///
    /// Use it to observe the code under test while transfers are in progress: how many it runs at once
    /// (``waitForInFlight(count:)``, ``maxConcurrentCalls``), what it reports meanwhile, and what it does
    /// when it cancels them. A parked call whose task is cancelled throws `CancellationError` at once.
    ///
    /// ```swift
    /// await storage.hold()
    /// let uploads = (1...3).map { n in
    ///     Task { try await storage.uploadFile(data: Data([UInt8(n)]), attachment: attachments[n - 1]) }
    /// }
    /// await storage.waitForInFlight(count: 3)
    /// await storage.release()
    /// ```
    public func hold() {
        isHolding = true
    }

    /// Stops holding: resumes every parked call, in the order they arrived, and lets later calls through.
    ///
    /// ```swift
    /// await storage.release()
    /// ```
    public func release() {
        isHolding = false
        if downloadHoldOffset != nil { passedHold = true }
        let parked = suspended.withLock { suspended in
            defer { suspended.parkedCalls = [:] }
            return suspended.parkedCalls.sorted { $0.key < $1.key }
        }
        for (_, continuation) in parked {
            continuation.resume()
        }
    }

    /// Suspends the calling task until at least `count` calls are in flight at once.
    ///
    /// Returns at once when ``inFlightCount`` is already at least `count`. Otherwise the task is resumed by
    /// the call that brings the count to `count` (there is no polling). A call counts as in flight from the
    /// moment it starts, so with no latency, a call that made this method return is already parked if the
    /// storage is held.
    ///
    /// If the waiting task is cancelled, the method returns early, without the condition being met, so a
    /// cancelled test does not hang here.
    ///
    /// ```swift
    /// await storage.hold()
    /// let upload = Task { try await storage.uploadFile(data: Data(), attachment: attachment) }
    /// await storage.waitForInFlight(count: 1)
    /// upload.cancel()
    /// ```
    ///
    /// - Parameter count: The number of calls to wait for.
    public func waitForInFlight(count: Int) async {
        await wait { $0.inFlight >= count }
    }

    /// Suspends the calling task until at least `count` calls of `operation` have been made (counted as
    /// they start, like ``uploadCount``), whether they succeeded, failed or are still running.
    ///
    /// Returns at once when the count is already reached; otherwise the call that reaches it resumes the
    /// task (there is no polling). A cancelled waiting task returns early.
    ///
    /// ```swift
    /// try await queue.startSync()
    /// await storage.waitForCalls(.upload, count: 1)  // the startup pass tried the upload
    /// ```
    ///
    /// - Parameters:
    ///   - operation: The operation to count.
    ///   - count: The number of calls to wait for.
    public func waitForCalls(_ operation: Operation, count: Int) async {
        await wait { counters in
            switch operation {
            case .upload: counters.uploads >= count
            case .download: counters.downloads >= count
            case .delete: counters.deletes >= count
            }
        }
    }

    /// Suspends the calling task until no call is in flight (``inFlightCount`` is 0): every call made so
    /// far has returned or thrown, cancelled ones included. Returns at once when none is; a cancelled
    /// waiting task returns early.
    public func waitUntilNoCallInFlight() async {
        await wait { $0.inFlight == 0 }
    }

    private func wait(until isSatisfied: @escaping @Sendable (Counters) -> Bool) async {
        guard !isSatisfied(counters) else { return }
        let id = makeID()
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                // Deciding and storing happen under the lock that the cancellation handler takes too, and the
                // runtime marks a task cancelled before it runs the task's cancellation handlers: either this
                // sees `isCancelled` (and the handler finds nothing), or it stores the waiter before the
                // handler looks (and the handler resumes it). Whoever removes a waiter resumes it, once.
                let cancelled = suspended.withLock { suspended in
                    if Task.isCancelled { return true }
                    suspended.inFlightWaiters[id] = InFlightWaiter(isSatisfied: isSatisfied, continuation: continuation)
                    return false
                }
                if cancelled {
                    continuation.resume()
                }
            }
        } onCancel: {
            suspended.withLock { $0.inFlightWaiters.removeValue(forKey: id) }?.continuation.resume()
        }
    }

    /// Resumes the waiters whose condition now holds.
    private func resumeSatisfiedWaiters() {
        let now = counters
        let satisfied = suspended.withLock { suspended in
            let satisfied = suspended.inFlightWaiters.filter { $0.value.isSatisfied(now) }
            for id in satisfied.keys {
                suspended.inFlightWaiters[id] = nil
            }
            return satisfied.values.map(\.continuation)
        }
        for continuation in satisfied {
            continuation.resume()
        }
    }

    // MARK: - Private

    private func makeID() -> UInt64 {
        lastID += 1
        return lastID
    }

    /// Step 1 of every call: counts and logs it, marks it in flight, wakes the waiters that this satisfies,
    /// and returns the failure it should throw, if any.
    private func beginCall(_ operation: Operation, filename: String) -> (any Error)? {
        switch operation {
        case .upload: uploadCount += 1
        case .download: downloadCount += 1
        case .delete: deleteCount += 1
        }
        callLog.append(Call(operation: operation, filename: filename))
        inFlightCount += 1
        maxConcurrentCalls = max(maxConcurrentCalls, inFlightCount)

        resumeSatisfiedWaiters()

        if let throttle, inFlightCount > throttle.limit {
            refusedCount += 1
            return throttle.error
        }
        if let index = oneShotFailures.firstIndex(where: { $0.operation == nil || $0.operation == operation }) {
            let error = oneShotFailures[index].error
            oneShotFailures[index].remaining -= 1
            if oneShotFailures[index].remaining == 0 {
                oneShotFailures.remove(at: index)
            }
            return error
        }
        return permanentFailures[operation]
    }

    /// The last step of every call, however it ends.
    private func endCall() {
        inFlightCount -= 1
        resumeSatisfiedWaiters()
    }

    /// Steps 2 to 4 short of the work itself: latency, hold, injected failure.
    private func prepare(failure: (any Error)?) async throws {
        if latency > .zero {
            try await clock.sleep(for: latency)
        }
        if isHolding {
            try await park()
        }
        if let failure {
            throw failure
        }
    }

    /// Suspends the calling call until ``release()`` or until its task is cancelled.
    private func park() async throws {
        let id = makeID()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                // As in `wait(until:)`: decided and stored under the lock the cancellation handler takes, so a
                // cancellation is either seen here or finds the parked call; each continuation is resumed
                // exactly once, by whoever removes it from `parkedCalls` (this, the handler, or `release()`).
                let cancelled = suspended.withLock { suspended in
                    if Task.isCancelled { return true }
                    suspended.parkedCalls[id] = continuation
                    return false
                }
                if cancelled {
                    continuation.resume(throwing: CancellationError())
                }
            }
        } onCancel: {
            suspended.withLock { $0.parkedCalls.removeValue(forKey: id) }?.resume(throwing: CancellationError())
        }
    }
}

extension InMemoryRemoteStorage: ListableRemoteStorage {
    /// Every stored file in one page, in the order of their names' UTF-8 bytes, named by filename, of
    /// unknown age. Not a counted call: no latency, hold or injected failure applies.
    public func listFiles(after continuation: String?) async throws -> RemoteFileListing {
        guard continuation == nil else { return RemoteFileListing(files: [], next: nil) }
        let files = storedFiles.map {
            RemoteFile(storedName: $0.key.name, filename: $0.key.name, size: Int64($0.value.count))
        }
        .sorted { $0.storedName.utf8.lexicographicallyPrecedes($1.storedName.utf8) }
        return RemoteFileListing(files: files, next: nil)
    }

    /// The filename itself.
    public nonisolated func storedName(forFilename filename: String) throws -> String {
        filename
    }

    /// Deletes the file with ``deleteFile(attachment:)`` (a counted delete call).
    public func deleteListedFile(_ file: RemoteFile) async throws {
        try await deleteFile(attachment: Attachment(id: file.storedName, filename: file.storedName, state: .archived))
    }

    /// The stored file's size and the SHA-256 stored with it; `nil` when there is none. Not a counted call.
    public func fileInfo(attachment: Attachment) async throws -> RemoteObjectInfo? {
        guard let data = storedFiles[Key(attachment.filename)] else { return nil }
        return RemoteObjectInfo(size: Int64(data.count), sha256: storedHashes[Key(attachment.filename)])
    }
}

extension InMemoryRemoteStorage: ReplaceableRemoteStorage {
    /// Replaces the stored file when its bytes have SHA-256 `expectedSHA256`, keeping `attachment.contentHash`
    /// as its stored SHA-256. A counted upload call: latency, holds and injected upload failures apply.
    public func replaceFile(fileURL: URL, attachment: Attachment, replacing expectedSHA256: String) async throws {
        let failure = beginCall(.upload, filename: attachment.filename)
        defer { endCall() }
        try await prepare(failure: failure)
        let data = try Data(contentsOf: fileURL)
        if let recorded = attachment.contentHash?.lowercased(), recorded != FileStreaming.sha256(data) {
            throw AttachmentError(
                code: .integrityMismatch,
                message: "the replacement for '\(attachment.filename)' is not the content its hash says",
                attachmentId: attachment.id, name: attachment.filename)
        }
        let current = try storedFile(for: attachment)
        guard FileStreaming.sha256(current) == expectedSHA256.lowercased() else {
            throw AttachmentError(
                code: .conflict,
                message: "Remote storage holds other content as '\(attachment.filename)'; nothing was replaced",
                attachmentId: attachment.id, name: attachment.filename)
        }
        try await takeBandwidth(data.count)
        storedFiles[Key(attachment.filename)] = data
        storedHashes[Key(attachment.filename)] = attachment.contentHash
    }
}
