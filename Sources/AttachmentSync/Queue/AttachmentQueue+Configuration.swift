import Foundation
import Logging
import Metrics
import Tracing

extension AttachmentQueue {
    /// How an ``AttachmentQueue`` behaves: where files live, how often it syncs, how many archived files it
    /// keeps, which clock it runs on.
    ///
    /// ```swift
    /// var configuration = AttachmentQueue.Configuration(attachmentsDirectory: directory)
    /// configuration.syncInterval = .seconds(60)
    /// configuration.maxConcurrentTransfers = 8
    /// let queue = AttachmentQueue(db: db, remoteStorage: remote, configuration: configuration)
    /// ```
    public struct Configuration: Sendable {
        /// The folder that holds the attachments' local files. The queue owns it: at startup it removes
        /// its own leftover temporary files and files it generated that no record refers to; any other
        /// file is left alone.
        public var attachmentsDirectory: String
        /// The name of the attachments table (see ``createAttachmentTable(name:)``). The default is
        /// `attachments`.
        public var attachmentsQueueTableName: String = "attachments"
        /// How often a sync pass runs on its own, retrying failed transfers (after the app was offline,
        /// say). `.zero` disables the periodic pass. The default is 30 seconds.
        public var syncInterval: Duration = .seconds(30)
        /// The shortest time between two sync passes triggered by changes; changes arriving meanwhile are
        /// handled together in the next pass. The default is 1 second.
        public var syncThrottleDuration: Duration = .seconds(1)
        /// How many archived attachments keep their local files as a cache; beyond it the oldest are
        /// deleted locally (never remotely). The default is 100.
        public var archivedCacheLimit: Int64 = 100
        /// Folders to create inside the attachments directory. Each must be a single path component. The
        /// default is none.
        public var subdirectories: [String] = []
        /// Whether attachments that the app's rows refer to are downloaded as soon as they appear: the
        /// PowerSync helpers' switch, a shorthand for ``downloadPolicy``.
        ///
        /// Setting `false` sets ``downloadPolicy`` to ``DownloadPolicy/onDemand`` (records are made, content
        /// is fetched only by ``AttachmentQueue/download(attachmentId:)``); setting `true` sets it back to
        /// ``DownloadPolicy/eager`` when it was on demand, and leaves any other policy alone. It reads `false`
        /// only when the policy is on demand for everything. The default is `true`.
        public var downloadAttachments: Bool {
            get { downloadPolicy.fixedMode != .onDemand }
            set {
                if !newValue {
                    downloadPolicy = .onDemand
                } else if downloadPolicy.fixedMode == .onDemand {
                    downloadPolicy = .eager
                }
            }
        }
        /// Which attachments are downloaded as soon as a row refers to them, and which only on request.
        /// The default is ``DownloadPolicy/eager``.
        public var downloadPolicy: DownloadPolicy = .eager
        /// The most bytes of local content to keep. Beyond it, after each sync pass, the least recently
        /// used content goes first: archived attachments' cached files (their records too), then on-demand
        /// attachments' content (purged back to remote-only). Content waiting for upload, eagerly
        /// downloaded content and pinned content (``AttachmentQueue/pin(attachmentId:)``) are never
        /// evicted. `nil` sets no budget. The default is `nil`.
        public var maxCacheBytes: Int64?
        /// The shortest time between two progress updates of one transfer (see
        /// ``AttachmentQueue/progress(attachmentId:)``); an update also goes out whenever the transfer has
        /// advanced by 1 % since the last one. The default is 100 milliseconds.
        public var progressInterval: Duration = .milliseconds(100)
        /// The most transfers (uploads, downloads and deletes together) running at once. The default is 4.
        public var maxConcurrentTransfers: Int = 4
        /// Where the queue learns whether the network is reachable, metered or constrained.
        ///
        /// While it says unreachable, no transfer starts, transfers in flight pause (a download keeps its
        /// partial file, a multipart upload its parts) and a failure counts no attempt; when it comes back,
        /// transfers whose last failure was the network's start over with a fresh backoff, and a pass runs at
        /// once. ``networkPolicy`` decides which transfers also wait for an unmetered network. Downloads
        /// asked for with ``AttachmentQueue/download(attachmentId:)`` ignore the policy (the user asked) but
        /// fail at once with ``AttachmentError/Code-swift.struct/remoteUnavailable`` while unreachable.
        /// Until the source's first report the queue assumes ``NetworkConditions/notYetReported``: reachable,
        /// but not unmetered. Shown in ``QueueStatus/network``.
        ///
        /// The default is `NWPathNetworkConditions()` (`NWPathMonitor`) on Apple platforms but watchOS, and
        /// `nil` on watchOS and Linux, where the network is taken as always reachable and unmetered; use
        /// ``ManualNetworkConditions`` to feed the queue from your own reachability code.
        public var networkConditions: (any NetworkConditionsSource)? = Configuration.defaultNetworkConditions
        /// Which transfers wait for an unmetered network (Wi-Fi, no Low Data Mode), by attachment. A transfer
        /// in flight when the network becomes metered pauses and resumes later. The default is
        /// ``NetworkPolicy/any``: every transfer runs on any reachable network.
        public var networkPolicy: NetworkPolicy = .any

        /// The default ``networkConditions``: `NWPathNetworkConditions()` on Apple platforms, `nil` on
        /// watchOS (which keeps `NWPathMonitor` unsatisfied for apps, see `NWPathNetworkConditions`) and
        /// elsewhere.
        public static var defaultNetworkConditions: (any NetworkConditionsSource)? {
            #if canImport(Network) && !os(watchOS)
                NWPathNetworkConditions()
            #else
                nil
            #endif
        }

        /// Caps on the bytes per second all uploads, and all downloads, move together (a token bucket per
        /// direction on ``clock``), like rclone's `--bwlimit`. The library's adapters honour it chunk by
        /// chunk; an adapter of your own does by taking from ``BandwidthThrottle/current`` (see there).
        /// Shown in ``QueueStatus/bandwidthLimit``. The default is `nil`: no cap.
        public var bandwidthLimit: BandwidthLimit?
        /// Whether the queue runs fewer transfers at once while remote storage refuses as overloaded: each
        /// such answer (429, 503 SlowDown or a `Retry-After`, see ``RemoteOverloadSignal``; not a failed
        /// connection) halves the number (once per round of transfers, down to 1), and each answer after that adds back
        /// about one per that many answers, up to ``maxConcurrentTransfers``. The whole queue slows down,
        /// not only the attachment that got the answer. The default is `true`.
        public var adaptiveConcurrency: Bool = true
        /// The clock that times periodic passes, throttling and retries. Tests pass a manual clock. The
        /// default is `ContinuousClock()`.
        public var clock: any Clock<Duration> = ContinuousClock()
        /// The current date, for what the queue stores in the attachments table (record timestamps, retry
        /// times, last use: they must survive a restart, so they are dates, not clock instants).
        ///
        /// The default follows ``clock``: the system's date when the queue is made, advanced as the clock
        /// advances, so a test that drives a manual clock moves stored times with it and never has to keep
        /// two time sources in step. Set it only to pin dates to something else. Read without being set, it
        /// gives the system's date.
        public var currentDate: @Sendable () -> Date {
            get { dateOverride ?? { Date() } }
            set { dateOverride = newValue }
        }
        /// The date set with ``currentDate``, if any.
        var dateOverride: (@Sendable () -> Date)?
        /// How long a failed transfer waits before its next try. The default is ``RetryBackoff/init(initialDelay:maximumDelay:jitter:)``:
        /// 1 second doubling to 5 minutes, with full jitter.
        public var retryBackoff = RetryBackoff()
        /// How long a download waits before asking again when remote storage has no file for it yet
        /// (``AttachmentError/Code-swift.struct/remoteNotFound``): the row arrived before the device that
        /// saved the attachment finished uploading it. Such a wait does not count as a failed try (it never
        /// reaches ``maxAttempts`` and never archives the attachment), shows in ``QueueStatus/awaitingUpload``,
        /// and ends early when the watched rows change or ``syncNow()`` is called. The default is 1 minute
        /// doubling to 15 minutes, with full jitter.
        public var notUploadedYetBackoff = RetryBackoff(initialDelay: .seconds(60), maximumDelay: .seconds(900))
        /// After this many failed tries in a row, a transfer is given up and its attachment archived.
        /// `nil` retries for ever, as the PowerSync helpers do. The default is `nil`.
        public var maxAttempts: Int?
        /// When startup checks the files of synced and archived attachments and removes leftover files:
        /// before ``AttachmentQueue/waitForInit()`` returns, or after, in the background (see
        /// ``StartupFileCheck``). Either way the check finds and fixes the same things, and the queued
        /// attachments (uploads, downloads, deletes) are always checked before `waitForInit()` returns.
        /// The default is ``StartupFileCheck/automatic(backgroundAbove:)`` with 10,000 records: a small table
        /// is checked before the queue is ready, a large one in the background.
        public var startupFileCheck: StartupFileCheck = .automatic(backgroundAbove: 10_000)
        /// How long the transfer lease lasts unless renewed. Several processes of one app (the app, its share
        /// extension, a widget) may open queues on one table and folder: each saves and deletes at any time,
        /// but only the one holding the lease transfers files, checks them at startup and removes leftovers.
        /// A queue takes the lease when it starts syncing (or runs ``AttachmentQueue/syncNow()``), renews it
        /// as it starts transfers, and gives it up when it stops, closes or ``AttachmentQueue/suspend()``s.
        /// A syncing queue in another process takes it over at its next pass once the holder is gone: at
        /// once when the holder was killed and the system lets this process ask (Linux, macOS), else when its
        /// lease has run out (a suspended iOS app, which its extensions may not ask about). No file lock is
        /// held for it (iOS ends a suspended app that holds one in a shared container). The default is 30
        /// seconds.
        public var leaseDuration: Duration = .seconds(30)
        /// Which transfers go to a background transfer service (a background `URLSession` on Apple
        /// platforms) instead of running in the process, so that they go on while the app is suspended or
        /// terminated (see ``BackgroundTransfers``). Needs a remote that conforms to
        /// ``BackgroundTransferForming``. The default is `nil`: every transfer runs in the process.
        public var backgroundTransfers: BackgroundTransfers?
        /// The file system calls the queue makes (tests substitute one that simulates crashes).
        var files: any FileOperations = SystemFileOperations()
        /// Where the queue reports its metrics (swift-metrics): transfers started, finished, failed and given
        /// up by kind (`attachment_sync_transfers_started`, `…_finished`, `…_failed`, `…_given_up`, dimension
        /// `kind`: `upload`, `download`, `delete`), bytes each way (`attachment_sync_bytes`, `direction`
        /// `up` or `down`), the delay before each retry (`attachment_sync_retry_delay`, a timer), the
        /// concurrency limit in force (`attachment_sync_concurrency_limit`, lowered while the remote is
        /// overloaded) and the records by state (`attachment_sync_queue_depth`, dimension `state`, counted at
        /// most every 10 seconds, at a sync pass).
        ///
        /// The metrics are made when the queue is made: bootstrap `MetricsSystem` before. Without a backend
        /// nothing is recorded and the queue depth is never counted. The default is `nil`: the process's
        /// `MetricsSystem.factory`.
        public var metricsFactory: (any MetricsFactory)?
        /// The tracer that gets a span per transfer (swift-distributed-tracing): `attachment-sync upload`,
        /// `…download` or `…delete`, of kind client, with the attachment's id (`attachment_sync.attachment_id`),
        /// its outcome (`attachment_sync.outcome`) and bytes, and the error of a failure. The transfer runs in
        /// the span's context, so an instrumented HTTP client's spans are its children.
        ///
        /// Read when the queue is made: bootstrap `InstrumentationSystem` before. The default is `nil`: the
        /// process's `InstrumentationSystem.tracer`; with none bootstrapped, no span is started.
        public var tracer: (any Tracer)?
        /// Where the queue logs. The default discards everything.
        public var logger: Logger = Logger(label: "AttachmentSync.AttachmentQueue") { _ in SwiftLogNoOpLogHandler() }

        /// A configuration with the defaults and the given attachments directory.
        public init(attachmentsDirectory: String) {
            self.attachmentsDirectory = attachmentsDirectory
        }

        /// Throws ``AttachmentError/Code-swift.struct/invalidConfiguration`` or
        /// ``AttachmentError/Code-swift.struct/invalidName`` naming the first option out of range.
        func validate() throws {
            func fail(_ name: String, _ reason: String) -> AttachmentError {
                AttachmentError(code: .invalidConfiguration, message: "\(name) \(reason)", name: name)
            }
            guard !attachmentsDirectory.isEmpty else { throw fail("attachmentsDirectory", "is empty") }
            guard syncInterval >= .zero else { throw fail("syncInterval", "is negative: \(syncInterval)") }
            guard syncThrottleDuration >= .zero else {
                throw fail("syncThrottleDuration", "is negative: \(syncThrottleDuration)")
            }
            guard archivedCacheLimit >= 0 else {
                throw fail("archivedCacheLimit", "is negative: \(archivedCacheLimit)")
            }
            if case .automatic(let count) = startupFileCheck, count < 0 {
                throw fail("startupFileCheck", "needs a record count of at least 0, not \(count)")
            }
            if let maxAttempts, maxAttempts < 1 {
                throw fail("maxAttempts", "must be at least 1 (or nil for unlimited), not \(maxAttempts)")
            }
            guard retryBackoff.initialDelay >= .zero, retryBackoff.maximumDelay >= retryBackoff.initialDelay else {
                throw fail("retryBackoff", "needs 0 ≤ initialDelay ≤ maximumDelay, not \(retryBackoff)")
            }
            guard notUploadedYetBackoff.initialDelay >= .zero,
                notUploadedYetBackoff.maximumDelay >= notUploadedYetBackoff.initialDelay
            else {
                throw fail(
                    "notUploadedYetBackoff", "needs 0 ≤ initialDelay ≤ maximumDelay, not \(notUploadedYetBackoff)")
            }
            if let maxCacheBytes, maxCacheBytes < 0 {
                throw fail("maxCacheBytes", "is negative: \(maxCacheBytes)")
            }
            guard leaseDuration >= .milliseconds(30) else {
                throw fail("leaseDuration", "must be at least 30 milliseconds, not \(leaseDuration)")
            }
            guard progressInterval >= .zero else {
                throw fail("progressInterval", "is negative: \(progressInterval)")
            }
            try bandwidthLimit?.validate()
            try backgroundTransfers?.validate()
            guard maxConcurrentTransfers >= 1 else {
                throw fail("maxConcurrentTransfers", "must be at least 1, not \(maxConcurrentTransfers)")
            }
            for subdirectory in subdirectories {
                try FileName.validate(subdirectory, kind: "subdirectory")
            }
            do {
                try SqlIdentifier.validate(attachmentsQueueTableName, kind: "table")
            } catch let error as LocalDatabaseError {
                throw AttachmentError(
                    code: .invalidConfiguration,
                    message: error.message,
                    name: "attachmentsQueueTableName",
                    underlying: error
                )
            }
        }

        // MARK: Data Protection and backups (Apple platforms)

        /// The Data Protection class of every folder and file the queue makes: the attachments directory
        /// and its subdirectories (set at startup, even when they exist, so that what adapters create there
        /// takes it too), saved files (a file handed over with `moveFile` included), and downloads.
        ///
        /// While a device is locked, files of class ``FileProtection/complete`` cannot be read or written,
        /// so their transfers cannot run until it is unlocked; ``FileProtection/completeUntilFirstUserAuthentication``
        /// keeps transfers going with the screen off once the user has unlocked the device after a restart.
        /// The app's database is the app's: give it a class under which the queue can commit while the app
        /// runs in the background (SQLite's `-wal` and `-shm` files take their folder's class).
        ///
        /// Applied on iOS, iPadOS, tvOS, watchOS and visionOS. macOS and Mac Catalyst leave classes to the
        /// system, and Linux has none: there the option changes nothing. A ``LocalStorageAdapter`` of your
        /// own that transforms content (``LocalStorageAdapter/plainFileURL(filePath:)`` is `nil`) sets
        /// classes on its files itself. The default is
        /// ``FileProtection/completeUntilFirstUserAuthentication``.
        public var fileProtection: FileProtection = .completeUntilFirstUserAuthentication

        /// Whether downloaded attachments are excluded from backups (iCloud and computer backups of a
        /// device, Time Machine on a Mac), as Apple asks of content an app can download again.
        ///
        /// Only downloads are excluded: content saved on this device is backed up before and after its
        /// upload (it is the user's document, and the backup outlives a remote that loses it). After a
        /// restore, startup finds the downloaded files missing and downloads them again. Apple platforms
        /// only; nothing happens on Linux. The default is `true`.
        public var excludesDownloadsFromBackup: Bool = true
    }
}

extension Duration {
    /// A duration from the seed API's `TimeInterval` seconds; negative or non-finite values stay invalid
    /// (negative) so that validation reports them.
    /// Values too large for a `Duration` of milliseconds saturate (a year or a million years both mean
    /// "practically never").
    init(seedSeconds seconds: TimeInterval) {
        if seconds.isFinite {
            self = .clampedMilliseconds(Int64(clamping: (seconds * 1000).rounded()))
        } else {
            self = .seconds(-1)
        }
    }
}
