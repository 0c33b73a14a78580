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
    /// Metrics and transfer spans (``Configuration/metricsFactory``, ``Configuration/tracer``).
    let telemetry: QueueTelemetry
    /// When the queue depth was last counted for ``telemetry`` (milliseconds since 1970), `nil` before.
    var depthCountedAt: Int64?
    /// The caps of ``Configuration/bandwidthLimit``, one per direction that has one.
    let throttles: TransferWorker.Throttles
    /// Commits verified downloads, in groups when several finish together.
    let downloadCommitter = DownloadCommitter()
    /// Commits finished uploads, in groups when several finish together.
    let uploadCommitter: UploadCommitter
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
    /// Where transfers that suit it are handed to a background service (see
    /// ``Configuration/backgroundTransfers``), `nil` when none are (or the remote cannot form requests ahead).
    let handOffContext: HandOffContext?
    /// Adoption of the background service's results (see ``adoptHandOffs()``).
    var adoption = AdoptionState()
    /// The callers waiting for downloads asked for, by the token the machine gave each
    /// (see ``OnDemandDownloads``).
    var onDemandWaiters: [Int: CheckedContinuation<Attachment, any Error>] = [:]

    /// The state machine as the queue uses it: tasks as handles, continuations as waiters.
    typealias Machine = QueueStateMachine<Task<Void, Never>, CheckedContinuation<Void, Never>>

    struct SyncSession {
        var tasks: [Task<Void, Never>]
        var triggers: AsyncStream<Void>.Continuation
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
        let forming = (remoteStorage as? any BackgroundTransferForming).flatMap {
            $0.formsBackgroundTransfers ? $0 : nil
        }
        let handsOff = configuration.backgroundTransfers != nil && forming != nil
        self.store = AttachmentStore(table: configuration.attachmentsQueueTableName, handsOff: handsOff)
        if let options = configuration.backgroundTransfers, let forming {
            let policy = configuration.networkPolicy
            self.handOffContext = HandOffContext(
                options: options, remote: forming, store: HandOffStore(scope: configuration.attachmentsQueueTableName),
                handing: LockedValue([]), writtenBodies: LockedValue([]), requirement: { policy.requirement($0) })
        } else {
            self.handOffContext = nil
        }
        self.claims = ClaimStore(
            scope: configuration.attachmentsQueueTableName,
            database: db.path.map { URL(fileURLWithPath: $0).standardizedFileURL.path } ?? "\(ObjectIdentifier(db))")
        self.files = configuration.files
        let wallClock =
            configuration.dateOverride.map(WallClock.init(date:)) ?? WallClock(following: configuration.clock)
        self.wallClock = wallClock
        self.timestamps = MonotonicTimestamps(wallClock: wallClock)
        self.uploadCommitter = UploadCommitter(db: db, store: store, timestamps: timestamps)
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
        self.telemetry = QueueTelemetry(factory: configuration.metricsFactory, tracer: configuration.tracer)
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
