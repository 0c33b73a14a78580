import Foundation

/// A snapshot of the queue, from ``AttachmentQueue/status``: how many attachments are in each state and
/// how big they are, what is transferring now, and what waits for a retry.
public struct QueueStatus: Sendable {
    /// How many attachments are in one state, and their bytes.
    ///
    /// Sizes come from synced rows and from whatever writes the table, so any value may be there: only sizes
    /// that are integers of at least 0 are summed, and sums saturate at `Int64.max` rather than overflow.
    /// The records left out are counted: ``unknownSizeCount`` (no size recorded, as for a download not
    /// fetched yet whose row carries none) and ``invalidSizeCount`` (a negative size, or a value that is not
    /// an integer).
    public struct Totals: Sendable, Hashable {
        /// Attachments in the state.
        public var count: Int
        /// The sum of their sizes, where known and valid, saturated at `Int64.max`.
        public var bytes: Int64
        /// How many of them have no size recorded: ``bytes`` leaves them out. The default is 0.
        public var unknownSizeCount: Int = 0
        /// How many of them have a size that is not a byte count (negative, or a real, text or blob value):
        /// ``bytes`` leaves them out. The default is 0.
        public var invalidSizeCount: Int = 0

        /// Creates totals.
        public init(count: Int, bytes: Int64) {
            self.count = count
            self.bytes = bytes
        }

        /// Creates totals that say how many records of unknown or invalid size they leave out.
        public init(count: Int, bytes: Int64, unknownSizeCount: Int, invalidSizeCount: Int) {
            self.count = count
            self.bytes = bytes
            self.unknownSizeCount = unknownSizeCount
            self.invalidSizeCount = invalidSizeCount
        }
    }

    /// An attachment whose last transfer failed and that waits for its next attempt.
    public struct Retry: Sendable, Hashable {
        /// The attachment's id.
        public var attachmentId: String
        /// The state it waits in (upload, download or delete).
        public var state: AttachmentState
        /// Failed tries so far.
        public var attempts: Int
        /// When the next try may start.
        public var nextAttemptAt: Date
        /// The last failure's description.
        public var lastError: String?
        /// How many downloads in a row found no remote file: the device that saved the attachment has not
        /// uploaded it yet (see ``AttachmentQueue/Configuration/notUploadedYetBackoff``). 0 for any other
        /// failure. Such waits are not counted in ``attempts``.
        public var awaitingUpload: Int = 0
        /// How many tries in a row got no answer from remote storage at all (connection refused or reset, a
        /// name that does not resolve, a timeout before any answer): the network's failures. 0 for any other
        /// failure. They are not counted in ``attempts`` and never give a transfer up; the wait starts over
        /// when the network source reports the network back.
        public var networkFailures: Int = 0
        /// How many tries in a row could not reach the local file or folder (permission denied, an I/O
        /// error, the protected data of a locked device): the file may be intact, so it is neither given up
        /// nor removed. 0 for any other failure. They are not counted in ``attempts``; the wait starts over
        /// once a transfer reaches the local files again.
        public var localFileFailures: Int = 0
        /// How many tries in a row found the encryption key the file needs missing from the app's
        /// ``KeyProvider`` (``lastError`` names the key id). 0 for any other failure. They are not counted
        /// in ``attempts`` and never give a transfer up; the wait starts over when the app calls
        /// ``AttachmentQueue/keysDidChange()``.
        public var keyFailures: Int = 0
    }

    /// An attachment whose transfer the queue gave up on (see ``Attachment/givenUp``); it stays archived
    /// until ``AttachmentQueue/retry(attachmentId:)``.
    public struct GivenUp: Sendable, Hashable {
        /// The attachment's id.
        public var attachmentId: String
        /// The queued state whose transfer was given up: upload, download or delete.
        public var state: AttachmentState
        /// Failed tries before it was given up.
        public var attempts: Int
        /// The last failure's description.
        public var lastError: String?
        /// Whether its content is on this device only (a given-up upload): the local file is the only copy.
        public var isLocalOnly: Bool
    }

    /// Totals per state; a state with no attachment is absent.
    public var states: [AttachmentState: Totals]
    /// The bytes of content on this device.
    public var localContentBytes: Int64
    /// Transfers in flight, with their progress, by attachment id.
    public var transfers: [AttachmentProgress]
    /// Bytes uploaded and downloaded since the queue was created.
    public var bytesTransferred: Int64
    /// How many transfers the queue runs at once while remote storage refuses as overloaded (see
    /// ``AttachmentQueue/Configuration/adaptiveConcurrency``); `nil` when it runs the configured
    /// ``AttachmentQueue/Configuration/maxConcurrentTransfers``.
    public var throttledConcurrency: Int? = nil
    /// The caps on bytes per second the queue's transfers move (``AttachmentQueue/Configuration/bandwidthLimit``),
    /// or `nil` when there are none.
    public var bandwidthLimit: BandwidthLimit? = nil
    /// The network's conditions as the queue's source last reported them (see
    /// ``AttachmentQueue/Configuration/networkConditions``), or `nil` when it has no source.
    public var network: NetworkConditions? = nil
    /// Whether transfers are paused because the network is unreachable.
    public var isPausedForNetwork: Bool { network?.isReachable == false }
    /// Whether transfers are paused because the local files are out of reach: a transfer could not read
    /// (or write) its file in the attachments directory for another reason than "no such file", as while an
    /// iPhone is locked and the files' Data Protection class makes them unreadable. Like an offline queue,
    /// a paused one starts nothing and spends no attempt; it tries one transfer at each trigger (a save,
    /// ``AttachmentQueue/syncNow()``, the periodic pass, the device's unlock on iOS) and goes on as soon as
    /// one reaches its files. ``waitingForLocalFiles`` lists the transfers waiting.
    public var isPausedForLocalFiles: Bool = false
    /// The transfers handed to the background transfer service (see
    /// ``AttachmentQueue/Configuration/backgroundTransfers``) whose results are not adopted yet, by the state
    /// of their attachment (``AttachmentState/queuedUpload`` or ``AttachmentState/queuedDownload``; one
    /// deleted or archived meanwhile shows under its new state). They are counted in ``states`` too: their
    /// attachments stay queued until the results come back. The system runs them when it sees fit, and
    /// reports no progress of them. Empty when nothing was handed off.
    ///
    /// ```swift
    /// let background = status.handedOff[.queuedUpload]?.count ?? 0
    /// label.text = "\(status.count(.queuedUpload) - background) waiting, \(background) uploading in the background"
    /// ```
    public var handedOff: [AttachmentState: Totals] = [:]
    /// Attachments waiting for a retry, soonest first.
    public var waitingForRetry: [Retry]
    /// The downloads among ``waitingForRetry`` whose remote file does not exist yet: the devices that saved
    /// them have not finished uploading.
    public var awaitingUpload: [Retry] { waitingForRetry.filter { $0.awaitingUpload > 0 } }
    /// The transfers among ``waitingForRetry`` whose last tries could not reach their local files (see
    /// ``Retry/localFileFailures``): while this is not empty, the attachments folder (or some of its
    /// files) cannot be read or written, and nothing is given up or removed because of it.
    public var waitingForLocalFiles: [Retry] { waitingForRetry.filter { $0.localFileFailures > 0 } }
    /// The transfers among ``waitingForRetry`` whose last tries got no answer from remote storage (see
    /// ``Retry/networkFailures``).
    public var waitingForNetwork: [Retry] { waitingForRetry.filter { $0.networkFailures > 0 } }
    /// The transfers among ``waitingForRetry`` whose encryption key is not on this device (see
    /// ``Retry/keyFailures``): their files are kept, nothing is given up, and they go once the app's
    /// ``KeyProvider`` has the key and the app calls ``AttachmentQueue/keysDidChange()``.
    public var waitingForKeys: [Retry] { waitingForRetry.filter { $0.keyFailures > 0 } }
    /// Content that is on this device and has never reached remote storage (waiting for upload, or its
    /// upload given up): if the device were lost now, these files would be.
    public var localOnly: Totals = Totals(count: 0, bytes: 0)
    /// Attachments whose transfer was given up, by id.
    public var givenUp: [GivenUp] = []
    /// The local content, by what may be evicted and why the rest is kept, against
    /// ``AttachmentQueue/Configuration/maxCacheBytes`` when one is set.
    public var cache = Cache(
        budget: nil, usedBytes: 0, evictableBytes: 0, pinnedBytes: 0, notUploadedBytes: 0, keptBytes: 0)

    /// The local content against the cache budget, by what may be evicted and why the rest is kept.
    ///
    /// ```swift
    /// if status.cache.cannotMeetBudget {
    ///     warn("\(status.cache.pinnedBytes) bytes pinned keep the cache over its budget")
    /// }
    /// ```
    public struct Cache: Sendable, Hashable {
        /// The budget, ``AttachmentQueue/Configuration/maxCacheBytes``; `nil` when none is set.
        public var budget: Int64?
        /// The bytes of content on this device.
        public var usedBytes: Int64
        /// Bytes the queue may evict: archived content and on-demand content that reached remote storage.
        public var evictableBytes: Int64
        /// Bytes kept because they are pinned (``AttachmentQueue/pin(attachmentId:)``).
        public var pinnedBytes: Int64
        /// Bytes kept because they never reached remote storage: the only copy.
        public var notUploadedBytes: Int64
        /// Bytes kept because they were downloaded eagerly (or belong to a transfer still queued).
        public var keptBytes: Int64

        /// Whether the budget cannot be met: even with every evictable byte gone, the content kept for the
        /// reasons above is more than the budget. The queue then stays over it rather than lose a file.
        /// `false` without a budget.
        public var cannotMeetBudget: Bool {
            guard let budget else { return false }
            return CachePolicy(budget: budget).cannotMeet(used: usedBytes, evictable: evictableBytes)
        }
    }

    /// How many attachments are in `state`.
    public func count(_ state: AttachmentState) -> Int {
        states[state]?.count ?? 0
    }
}
