import Foundation
import Logging

/// Keeps the files that the app's rows refer to in sync with remote storage.
///
/// The queue records every attachment in a local-only table (see ``createAttachmentTable(name:)``) and
/// makes files match it:
/// - ``saveFile(data:mediaType:fileExtension:metaData:id:updateHook:)`` stores a new file and queues it
///   for upload, in the same transaction as the app's row that refers to it;
/// - the `watchAttachments` query says which attachments the app's rows refer to: new ones are
///   downloaded, ones no longer referred to are archived (their files kept as a cache, then evicted);
/// - ``deleteFile(attachmentId:updateHook:)`` deletes one locally and remotely.
///
/// Transfers run in the background while ``startSync()`` is on, triggered by changes to the attachments
/// table (throttled), by a periodic pass, and by ``syncNow()``. Each result is committed as soon as its
/// transfer finishes, conditionally, so a decision made meanwhile is never overwritten; everything the
/// queue knows is in the table, so it resumes after a restart or a crash.
///
/// ```swift
/// let queue = AttachmentQueue(
///     db: db,
///     attachmentsDirectory: attachmentsDirectory,
///     remoteStorage: RemoteStorage(),
///     watchAttachments: { try db.watch(
///         options: WatchOptions(
///             sql: "SELECT photo_id FROM checklists WHERE photo_id IS NOT NULL",
///             parameters: [],
///             mapper: { cursor in
///                 try WatchedAttachmentItem(id: cursor.getString(name: "photo_id"), fileExtension: "jpg")
///             }
///         )
///     ) }
/// )
/// try await queue.startSync()
///
/// let photo = try await queue.saveFile(data: jpeg, mediaType: "image/jpeg", fileExtension: "jpg") { tx, attachment in
///     try tx.execute(sql: "UPDATE checklists SET photo_id = ? WHERE id = ?", arguments: [attachment.id, checklistId])
/// }
/// ```
public actor AttachmentQueue {
    /// The database that holds the attachments table and the app's rows.
    public nonisolated let db: LocalDatabase
    /// Where files are uploaded to and downloaded from.
    public nonisolated let remoteStorage: any RemoteStorageAdapter
    /// How files are read and written on this device.
    public nonisolated let localStorage: any LocalStorageAdapter
    /// The queue's options.
    public nonisolated let configuration: Configuration
    /// The attachments directory as an absolute URL.
    public nonisolated let attachmentsDirectory: URL
    /// ``attachmentsDirectory``'s path, made once.
    nonisolated let attachmentsPath: String

    let errorHandler: (any SyncErrorHandler)?
    let watchAttachments: (@Sendable () throws -> AsyncThrowingStream<[WatchedAttachmentItem], any Error>)?
    let store: AttachmentStore
    /// The queue's own file system calls (staging, linking, flushing, hashing).
    let files: any FileOperations
    let logger: Logger
    /// The one source of calendar time for what the queue stores (see ``Configuration/currentDate``).
    let wallClock: WallClock
    /// Record timestamps, from ``wallClock``.
    let timestamps: MonotonicTimestamps
    let reconciler: Reconciler
    let progressCenter: ProgressCenter
    /// The caps of ``Configuration/bandwidthLimit``, one per direction that has one.
    let throttles: TransferWorker.Throttles
    /// Commits verified downloads, in groups when several finish together.
    let downloadCommitter = DownloadCommitter()
    /// The network's conditions as last reported by ``Configuration/networkConditions``, for transfers
    /// (the machine keeps its own copy for scheduling): ``NetworkConditions/notYetReported`` until the
    /// source's first report, ``NetworkConditions/unrestricted`` without a source.
    let networkNow: LockedValue<NetworkConditions>
    /// Follows ``Configuration/networkConditions`` from startup until ``close()``.
    var networkFollower: Task<Void, Never>?
    /// Follows the device's unlocks (``ProtectedData``), where the system tells of them, until ``close()``.
    var unlockFollower: Task<Void, Never>?
    /// What happens to attachments, for ``events``: it keeps the newest 10,000 events a reader has not taken.
    let eventCenter = Broadcaster<AttachmentEvent>(bufferingPolicy: .bufferingNewest(10_000))

    /// Startup (validation, folders, verification of files against records), run once on first use.
    var initialization: Task<Void, any Error>?
    /// Startup's check of synced and archived records and clean-up, when it runs in the background (see
    /// ``Configuration/startupFileCheck``); cancelled by ``close()``.
    var backgroundFileCheck: Task<Void, any Error>?
    /// The scheduling state: transfers in flight, reserved ids, retry timer, idle waiters, the reconcile
    /// baseline. Every decision on it is made by the machine; the actor carries its actions out.
    var machine: Machine
    /// The background tasks of a running sync, `nil` when stopped.
    var session: SyncSession?
    /// The archive trim in progress: trims run one at a time, so `expireCache` returns only once every
    /// eviction it asked for has happened, files included.
    var archiveTrim: Task<Void, any Error>?
    /// When downloads waiting for another device's upload were last brought forward (milliseconds since
    /// 1970), to space out those a stream of watch emissions asks for.
    var lastAwaitingBringForward: Int64?
    /// The claims shared with the app's other processes: the transfer lease and the saves in progress.
    let claims: ClaimStore
    /// When the transfer lease this queue holds runs out (milliseconds since 1970), `nil` when it holds none.
    var leaseExpiresAt: Int64?
    /// Startup's check of files and clean-up waits for the lease: another process held it at startup.
    var startupCheckDeferred = false
    /// The ``syncNow()`` calls in progress, which want the lease.
    var leaseUsers = 0
    /// Whether startup's check of files runs in the background (it wants the lease).
    var backgroundFileCheckRunning = false
    /// Whether sync was on when ``suspend()`` was called (`nil` when not suspended).
    var syncingBeforeSuspension: Bool?
    /// Downloads asked for and in flight, by attachment id.
    var sharedDownloads: [String: SharedDownload] = [:]
    var nextWaiterToken = 0

    /// The state machine as the queue uses it: tasks as handles, continuations as waiters.
    typealias Machine = QueueStateMachine<Task<Void, Never>, CheckedContinuation<Void, Never>>

    struct SyncSession {
        var tasks: [Task<Void, Never>]
        var triggers: AsyncStream<Void>.Continuation
    }

    /// A download asked for with ``download(attachmentId:)``, shared by every caller waiting for it.
    final class SharedDownload {
        var waiters: [Int: CheckedContinuation<Attachment, any Error>] = [:]
        var task: Task<Void, Never>?
        /// Its last waiter gave up and it was cancelled: a new caller waits for it to wind down, then starts
        /// afresh, instead of joining a transfer that ends in `CancellationError`.
        var abandoned = false
    }

    // MARK: - Creating a queue

    /// Creates a queue from a configuration.
    ///
    /// Nothing happens until the first call: then the queue checks the configuration and the attachments
    /// table, creates its folders, and reconciles its records with the files on disk (see
    /// ``waitForInit()``).
    ///
    /// - Parameters:
    ///   - db: The database holding the attachments table (``createAttachmentTable(name:)``).
    ///   - remoteStorage: Where files are uploaded to and downloaded from.
    ///   - configuration: Directory, intervals, limits, clock and logger.
    ///   - watchAttachments: Makes the stream of attachments the app's rows refer to; called on each
    ///     ``startSync()``. The default is `nil`: nothing is downloaded or archived automatically.
    ///   - localStorage: How files are stored on the device. The default is ``FileManagerStorageAdapter``.
    ///   - errorHandler: Decides between retrying and archiving after a failed transfer. The default is
    ///     `nil`: retry at the next sync trigger.
    public init(
        db: LocalDatabase,
        remoteStorage: any RemoteStorageAdapter,
        configuration: Configuration,
        watchAttachments: (@Sendable () throws -> AsyncThrowingStream<[WatchedAttachmentItem], any Error>)? = nil,
        localStorage: any LocalStorageAdapter = FileManagerStorageAdapter(),
        errorHandler: (any SyncErrorHandler)? = nil
    ) {
        self.db = db
        self.remoteStorage = remoteStorage
        self.configuration = configuration
        self.watchAttachments = watchAttachments
        self.localStorage = localStorage
        self.errorHandler = errorHandler
        self.attachmentsDirectory =
            URL(fileURLWithPath: configuration.attachmentsDirectory, isDirectory: true)
            .standardizedFileURL
        self.attachmentsPath = attachmentsDirectory.path
        self.store = AttachmentStore(table: configuration.attachmentsQueueTableName)
        self.claims = ClaimStore(
            scope: configuration.attachmentsQueueTableName,
            database: db.path.map { URL(fileURLWithPath: $0).standardizedFileURL.path } ?? "\(ObjectIdentifier(db))")
        self.files = configuration.files
        let wallClock =
            configuration.dateOverride.map(WallClock.init(date:)) ?? WallClock(following: configuration.clock)
        self.wallClock = wallClock
        self.timestamps = MonotonicTimestamps(wallClock: wallClock)
        self.logger = configuration.logger
        let network: NetworkConditions = configuration.networkConditions == nil ? .unrestricted : .notYetReported
        self.networkNow = LockedValue(network)
        self.machine = QueueStateMachine(
            maxConcurrentTransfers: configuration.maxConcurrentTransfers, adaptive: configuration.adaptiveConcurrency,
            network: network,
            failures: FailurePolicy(
                retryBackoff: configuration.retryBackoff, maxAttempts: configuration.maxAttempts,
                notUploadedYetBackoff: configuration.notUploadedYetBackoff))
        self.reconciler = Reconciler(policy: configuration.downloadPolicy)
        self.progressCenter = ProgressCenter(
            clock: configuration.clock, interval: max(.zero, configuration.progressInterval))
        self.throttles = TransferWorker.Throttles(limit: configuration.bandwidthLimit, clock: configuration.clock)
    }

    /// Creates a queue with the parameters of the PowerSync attachment helpers (a convenience over
    /// ``init(db:remoteStorage:configuration:watchAttachments:localStorage:errorHandler:)``).
    ///
    /// - Parameters:
    ///   - db: The database holding the attachments table.
    ///   - attachmentsDirectory: The folder for the attachments' local files.
    ///   - remoteStorage: Where files are uploaded to and downloaded from.
    ///   - watchAttachments: Makes the stream of attachments the app's rows refer to. The default is `nil`.
    ///   - localStorage: How files are stored on the device. The default is ``FileManagerStorageAdapter``.
    ///   - attachmentsQueueTableName: The attachments table's name. The default is `attachments`.
    ///   - errorHandler: Decides between retrying and archiving after a failed transfer. The default is
    ///     `nil`: retry at the next trigger.
    ///   - syncInterval: Seconds between periodic passes; `0` disables them. The default is 30.
    ///   - archivedCacheLimit: Archived attachments whose files are kept. The default is 100.
    ///   - syncThrottleDuration: Seconds between passes triggered by changes. The default is 1.
    ///   - subdirectories: Folders to create in the attachments directory. The default is `nil` (none).
    ///   - downloadAttachments: Whether watched attachments are downloaded. The default is `true`.
    ///   - logger: Where the queue logs. The default is `nil`: nothing is logged.
    public init(
        db: LocalDatabase,
        attachmentsDirectory: String,
        remoteStorage: any RemoteStorageAdapter,
        watchAttachments: (@Sendable () throws -> AsyncThrowingStream<[WatchedAttachmentItem], any Error>)? = nil,
        localStorage: any LocalStorageAdapter = FileManagerStorageAdapter(),
        attachmentsQueueTableName: String = "attachments",
        errorHandler: (any SyncErrorHandler)? = nil,
        syncInterval: TimeInterval = 30,
        archivedCacheLimit: Int64 = 100,
        syncThrottleDuration: TimeInterval = 1,
        subdirectories: [String]? = nil,
        downloadAttachments: Bool = true,
        logger: Logger? = nil
    ) {
        var configuration = Configuration(attachmentsDirectory: attachmentsDirectory)
        configuration.attachmentsQueueTableName = attachmentsQueueTableName
        configuration.syncInterval = Duration(seedSeconds: syncInterval)
        configuration.archivedCacheLimit = archivedCacheLimit
        configuration.syncThrottleDuration = Duration(seedSeconds: syncThrottleDuration)
        configuration.subdirectories = subdirectories ?? []
        configuration.downloadAttachments = downloadAttachments
        if let logger { configuration.logger = logger }
        self.init(
            db: db,
            remoteStorage: remoteStorage,
            configuration: configuration,
            watchAttachments: watchAttachments,
            localStorage: localStorage,
            errorHandler: errorHandler
        )
    }

    /// Creates a queue that follows one already-made stream of watched attachments, as in the older
    /// PowerSync docs (`watchedAttachments: try db.watch(…)`).
    ///
    /// A stream can be consumed once, so after ``stopSync()`` a new ``startSync()`` no longer follows the
    /// app's rows; prefer the `watchAttachments` closure, which makes a fresh stream each time.
    public init(
        db: LocalDatabase,
        attachmentsDirectory: String,
        remoteStorage: any RemoteStorageAdapter,
        watchedAttachments: AsyncThrowingStream<[WatchedAttachmentItem], any Error>,
        localStorage: any LocalStorageAdapter = FileManagerStorageAdapter(),
        attachmentsQueueTableName: String = "attachments",
        errorHandler: (any SyncErrorHandler)? = nil,
        syncInterval: TimeInterval = 30,
        archivedCacheLimit: Int64 = 100,
        syncThrottleDuration: TimeInterval = 1,
        subdirectories: [String]? = nil,
        downloadAttachments: Bool = true,
        logger: Logger? = nil
    ) {
        self.init(
            db: db,
            attachmentsDirectory: attachmentsDirectory,
            remoteStorage: remoteStorage,
            watchAttachments: { watchedAttachments },
            localStorage: localStorage,
            attachmentsQueueTableName: attachmentsQueueTableName,
            errorHandler: errorHandler,
            syncInterval: syncInterval,
            archivedCacheLimit: archivedCacheLimit,
            syncThrottleDuration: syncThrottleDuration,
            subdirectories: subdirectories,
            downloadAttachments: downloadAttachments,
            logger: logger
        )
    }

    /// A queue dropped without ``close()`` stops following the network (its lease, if it held one, runs out;
    /// a queue of this process on the same table takes it back at once).
    deinit {
        networkFollower?.cancel()
        unlockFollower?.cancel()
    }

    // MARK: - Lifecycle

    /// Waits for the queue's startup and rethrows its error.
    ///
    /// Startup runs once, on the first call of any method: it checks the configuration and the attachments
    /// table, creates the attachments directory and subdirectories, and verifies records against files:
    /// a synced attachment whose file is missing is queued for download again; a file waiting for upload
    /// that was lost is archived (or, when the save that made it was interrupted after its commit, put in
    /// place); leftover temporary files are removed. With a large table (see
    /// ``Configuration/startupFileCheck``), only the queued attachments are checked before this returns and
    /// the rest in the background; ``waitForStartupCheck()`` waits for all of it.
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/invalidConfiguration``
    ///   or ``AttachmentError/Code-swift.struct/invalidName`` for bad options, a missing attachments table
    ///   or missing columns; ``AttachmentError/Code-swift.struct/closed`` after ``close()``.
    public func waitForInit() async throws {
        try ensureOpen()
        let task: Task<Void, any Error>
        if let initialization {
            task = initialization
        } else {
            task = Task { try await self.initialize() }
            initialization = task
        }
        do {
            try await task.value
        } catch {
            // A failed startup (a folder that could not be created for a moment, say) is tried again by the
            // next call instead of failing every call for the life of the queue.
            if initialization == task { initialization = nil }
            throw error
        }
    }

    /// Waits until startup's check of files has finished, including the part that runs after
    /// ``waitForInit()`` when ``Configuration/startupFileCheck`` has it run in the background, and rethrows
    /// its error.
    ///
    /// When it returns, every synced attachment whose file was missing at startup is queued for download
    /// again, every archived one has let go of its missing file, and the leftovers of earlier runs are gone.
    /// Returns at once when the whole check ran before the queue was ready. A check that failed is not run
    /// again before the next startup.
    ///
    /// - Throws: The errors of ``waitForInit()``; what the background check met (database and file system
    ///   errors); `CancellationError` when ``close()`` stopped it.
    public func waitForStartupCheck() async throws {
        try await waitForInit()
        try await backgroundFileCheck?.value
    }

    /// Starts syncing in the background: follows `watchAttachments`, reacts to changes of the attachments
    /// table (throttled by ``Configuration/syncThrottleDuration``), runs a pass every
    /// ``Configuration/syncInterval``, and runs one right away. Calling it while syncing does nothing.
    public func startSync() async throws {
        try await waitForInit()
        guard session == nil else { return }
        // Before the first pass, which needs it (when another process holds it, a later pass takes it over).
        await takeLease()
        guard session == nil else { return }
        let (triggers, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        var tasks: [Task<Void, Never>] = [
            Task { await self.runTriggerLoop(triggers) },
            Task { await self.followAttachmentsTable(triggers: continuation) },
        ]
        if let watchAttachments {
            tasks.append(Task { await self.followWatchedAttachments(watchAttachments) })
        }
        if configuration.syncInterval > .zero {
            tasks.append(Task { await self.runPeriodicTimer() })
        }
        // The table watch's first emission is the startup trigger: one pass right away, reading the table
        // no earlier than the watch did, so no change slips between the two.
        session = SyncSession(tasks: tasks, triggers: continuation)
        machine.syncStarted()
        syncingBeforeSuspension = nil
        logger.debug("sync started")
    }

    /// Stops background syncing and interrupts transfers in flight; they are retried when syncing starts
    /// again. Returns promptly.
    ///
    /// Once it has returned, no transfer starts until ``startSync()`` or ``syncNow()`` is called again: a
    /// ``syncNow()`` in progress returns early (also when sync was not started). Downloads asked for with
    /// ``download(attachmentId:)`` go on.
    public func stopSync() async {
        perform(machine.stopRequested())
        let session = self.session
        self.session = nil
        if let session {
            session.triggers.finish()
            for task in session.tasks { task.cancel() }
            for task in session.tasks { await task.value }
        }
        // A pass that was reading the table when the tasks were cancelled may have started one more.
        perform(machine.stopFinished())
        if session != nil { logger.debug("sync stopped") }
        await releaseLeaseIfUnwanted()
    }

    /// The same as ``stopSync()``, under the name of earlier PowerSync versions.
    public func stopSyncing() async {
        await stopSync()
    }

    /// Closes the queue: later calls throw ``AttachmentError/Code-swift.struct/closed``; calls already in
    /// progress that change records or files (``saveFile(data:mediaType:fileExtension:metaData:id:updateHook:)``,
    /// ``deleteFile(attachmentId:updateHook:)``, ``purge(attachmentId:)``…) finish first; then syncing stops
    /// and transfers in flight are interrupted and waited for. When it returns the queue no longer touches
    /// the database or the files, so the app may close the database. The database itself stays open (it is
    /// the app's). Closing twice is harmless.
    public func close() async {
        guard machine.closeRequested() else { return }
        // Calls already inside (a `saveFile` between its file and its commit, say) finish first.
        while machine.operationsInProgress > 0 {
            await withCheckedContinuation { waiter in machine.parkUntilNoOperations(waiter)?.resume() }
        }
        if let initialization { _ = await initialization.result }
        backgroundFileCheck?.cancel()
        if let backgroundFileCheck { _ = await backgroundFileCheck.result }
        networkFollower?.cancel()
        await networkFollower?.value
        unlockFollower?.cancel()
        await unlockFollower?.value
        await stopSync()
        let (running, actions) = machine.closeTransfers()
        perform(actions)
        for task in running { await task.value }
        if let archiveTrim { _ = await archiveTrim.result }
        await releaseLease()
        eventCenter.finish()
        logger.debug("queue closed")
    }

    /// Runs a sync pass now and returns when the queue is idle again: every queued attachment has been
    /// tried once (failures wait for the next trigger) and no transfer is in flight.
    ///
    /// Works whether or not background sync is on. ``stopSync()`` or ``close()`` makes it return early.
    public func syncNow() async throws {
        try await waitForInit()
        leaseUsers += 1
        if await takeLease() {
            let generation = machine.manualRoundStarted()
            await bringForwardAwaitingUploads()
            await runPass()
            await waitUntilIdle()
            machine.manualRoundEnded(generation)
        } else {
            logger.debug("syncNow: another process of the app holds the transfer lease and transfers")
        }
        leaseUsers -= 1
        await releaseLeaseIfUnwanted()
    }

    func ensureOpen() throws {
        if machine.isClosed {
            throw AttachmentError(code: .closed, message: "the attachment queue is closed")
        }
    }

    /// Runs a call that changes records or files, after startup, as one ``close()`` waits for.
    func operation<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        try await waitForInit()
        try ensureOpen()
        machine.operationStarted()
        defer { perform(machine.operationEnded()) }
        return try await body()
    }

    // MARK: - Reading records

    /// The attachment with the given id, or `nil` when there is none.
    public func attachment(id: String) async throws -> Attachment? {
        try await waitForInit()
        let store = store
        let directory = attachmentsDirectory
        return try await db.readTransaction { tx in try store.record(id: id, in: tx)?.attachment(in: directory) }
    }

    /// The attachments in the given state, oldest change first.
    public func attachments(in state: AttachmentState) async throws -> [Attachment] {
        try await waitForInit()
        let store = store
        let directory = attachmentsDirectory
        return try await db.readTransaction { tx in
            try store.records(in: state, in: tx).map {
                $0.attachment(in: directory)
            }
        }
    }

    /// Every attachment, oldest change first.
    public func allAttachments() async throws -> [Attachment] {
        try await waitForInit()
        let store = store
        let directory = attachmentsDirectory
        return try await db.readTransaction { tx in try store.records(in: tx).map { $0.attachment(in: directory) } }
    }

    // MARK: - Helpers

    /// The absolute path of a file in the attachments directory.
    nonisolated func localPath(_ relativePath: String) -> String {
        attachmentsDirectory.appendingPathComponent(relativePath).path
    }

    func logError(_ message: String, _ error: any Error, id: String? = nil) {
        var metadata: Logger.Metadata = ["error": "\(error)"]
        if let id { metadata["attachment"] = "\(id)" }
        logger.error("\(message)", metadata: metadata)
    }
}
