/// The transfer slots: which transfers are in flight and how many may be, which ids saves hold, which
/// failed transfers wait for the next trigger, the reads of the queued records in flight, the network's
/// conditions and whether the local files are in reach. A sub-machine of ``QueueStateMachine``, which adds
/// the queue's lifecycle to every decision here: no I/O.
struct TransferSlots<Handle: Hashable & Sendable> {
    typealias Transfer = TransferPriority<Handle>.Transfer

    /// The most transfers in flight for which background transfers still start: the configured maximum,
    /// lowered while remote storage refuses as overloaded.
    private(set) var concurrency: AdaptiveConcurrency
    /// The network's conditions: while unreachable no transfer starts; a transfer starts only when they
    /// meet its requirement.
    private(set) var network: NetworkConditions
    /// Transfers in flight, by attachment id: at most one per attachment.
    private(set) var transfers: [String: Transfer] = [:]
    /// Ids an app raised: they start before any other queued transfer until their transfer ends.
    private(set) var raised: Set<String> = []
    /// Transfers paused for a higher-priority one: not held back until the next trigger when they end.
    private var pausedForPriority: Set<String> = []
    private var startCount = 0
    /// Ids whose save is in progress: not transferred before their file is in place.
    private(set) var reserved: Set<String> = []
    /// Ids whose transfer failed or was interrupted since the last trigger, with the state it ran in.
    private(set) var skippedUntilTrigger: [String: AttachmentState] = [:]
    private var finishedTransferCount = 0
    /// Ids that finished a transfer while a read was in flight, with the count at which they finished.
    private var finishedWhileReading: [String: Int] = [:]
    private(set) var readsInFlight = 0
    /// A transfer could not reach the local files and none has completed since.
    private var waitingForLocalFiles = false
    /// While ``waitingForLocalFiles``: a transfer started since the last pass began, to find out whether the
    /// files are back (see ``slotCount``).
    private var localFilesProbed = false

    init(concurrency: AdaptiveConcurrency, network: NetworkConditions) {
        self.concurrency = concurrency
        self.network = network
    }

    /// Nothing in flight and no read in progress.
    var isIdle: Bool { transfers.isEmpty && readsInFlight == 0 }

    /// How many background transfers may run now: the concurrency limit; while the local files are out of
    /// reach (a locked device's protected files, an unreadable folder), one per pass, which finds out
    /// whether they are back, and none beside those already in flight: the queue is paused like an offline
    /// one, without a source to say when it may go on.
    var slotCount: Int {
        guard waitingForLocalFiles else { return concurrency.current }
        return localFilesProbed ? 0 : 1
    }

    /// Whether a slot is free for a background transfer.
    var hasFreeSlot: Bool { transfers.count < slotCount }

    // MARK: Saves

    mutating func reserve(_ id: String) -> Bool { reserved.insert(id).inserted }
    mutating func release(_ id: String) { reserved.remove(id) }

    // MARK: Passes and reads

    /// A triggered pass begins: transfers that failed or were interrupted become eligible again.
    mutating func passStarted() {
        skippedUntilTrigger.removeAll()
        localFilesProbed = false
    }

    /// Ids made eligible again by `retry`.
    mutating func retried(_ ids: [String]) {
        for id in ids { skippedUntilTrigger[id] = nil }
    }

    /// How many more records a read takes while the network is metered or constrained, to look past those
    /// that wait for an unmetered one.
    static var networkReadAllowance: Int { 10_000 }

    /// Counts a read as in flight; returns how many rows it reads (enough to fill the free slots even when
    /// every busy or skipped record comes first) and the finished count it started at.
    mutating func beginRead() -> (limit: Int, finishedBefore: Int) {
        readsInFlight += 1
        // On a metered network, records waiting for an unmetered one may come first: read past them.
        let waitingForNetwork = network.isUnmetered ? 0 : Self.networkReadAllowance
        return (
            concurrency.current + transfers.count + reserved.count + skippedUntilTrigger.count + waitingForNetwork,
            finishedTransferCount
        )
    }

    mutating func endRead() {
        readsInFlight -= 1
        if readsInFlight == 0 { finishedWhileReading.removeAll() }
    }

    /// The records a read returned, once each, without those finished since the read began (`fresh`), and
    /// whether any was dropped so; raised records come first, due now whatever their retry time.
    mutating func fresh(_ records: [AttachmentRecord], finishedBefore: Int) -> (
        records: [AttachmentRecord], dropped: Bool
    ) {
        // A raised record comes twice (read by id, and in the queue's order): once is enough.
        var ids: Set<String> = []
        let records = records.filter { ids.insert($0.id).inserted }
        var fresh = records.filter { (finishedWhileReading[$0.id] ?? Int.min) <= finishedBefore }
        if !raised.isEmpty {
            // A raised id with no queued record (nothing to transfer, or done meanwhile) is let go: the read
            // includes every queued raised record.
            raised.formIntersection(ids.union(transfers.keys))
            let raisedRecords = fresh.filter { raised.contains($0.id) }.map {
                var record = $0
                record.nextAttemptAt = nil
                return record
            }
            fresh = raisedRecords + fresh.filter { !raised.contains($0.id) }
        }
        return (fresh, fresh.count < records.count)
    }

    /// Takes the slots of the transfers to start among `records` (due by `now`), in the scheduler's order.
    mutating func start(
        from records: [AttachmentRecord], now: Int64, requirement: (AttachmentRecord) -> NetworkRequirement
    ) -> [AttachmentRecord] {
        let network = network
        var requirements: [String: NetworkRequirement] = [:]
        let allowed = records.filter { record in
            let needed = requirement(record)
            requirements[record.id] = needed
            return needed.isMet(by: network)
        }
        let selected = TransferScheduler(maxConcurrentTransfers: slotCount).select(
            queued: allowed, busy: Set(transfers.keys).union(reserved), inFlight: transfers.count,
            skipped: skippedUntilTrigger, now: now)
        for record in selected {
            startCount += 1
            transfers[record.id] = Transfer(
                state: record.state, onRequest: false, handle: nil, generation: concurrency.generation,
                requirement: requirements[record.id] ?? .any, order: startCount)
        }
        if waitingForLocalFiles, !selected.isEmpty { localFilesProbed = true }
        return selected
    }

    // MARK: Transfers

    /// Attaches the task of a transfer whose slot ``start(from:now:requirement:)`` took.
    mutating func started(_ id: String, handle: Handle) {
        transfers[id]?.handle = handle
    }

    /// A download asked for on request started.
    mutating func startedOnRequest(_ id: String, state: AttachmentState, handle: Handle) {
        startCount += 1
        transfers[id] = Transfer(
            state: state, onRequest: true, handle: handle, generation: concurrency.generation, order: startCount)
    }

    /// Every background transfer's task, to cancel; each waits for the next trigger.
    mutating func cancelBackgroundTransfers() -> [Handle] {
        var handles: [Handle] = []
        for (id, transfer) in transfers where !transfer.onRequest {
            skippedUntilTrigger[id] = transfer.state
            if let handle = transfer.handle { handles.append(handle) }
        }
        return handles
    }

    /// The network's conditions changed: the tasks of background transfers whose requirement they no
    /// longer meet; whether it came back; whether it allows more than before.
    mutating func networkChanged(_ conditions: NetworkConditions) -> (
        cancel: [Handle], regained: Bool, improved: Bool
    ) {
        let previous = network
        network = conditions
        let cancel = transfers.values.filter { !$0.onRequest && !$0.requirement.isMet(by: conditions) }
            .compactMap(\.handle)
        let regained = !previous.isReachable && conditions.isReachable
        return (cancel, regained, regained || (!previous.isUnmetered && conditions.isUnmetered))
    }

    /// The transfer to pause so that one of `priority` can start (see ``TransferPriority``); with `mark`,
    /// it is remembered as paused for priority.
    mutating func pauseTransfer(for priority: Int, mark: Bool = true) -> (id: String, handle: Handle)? {
        guard
            let victim = TransferPriority.transferToPause(
                for: priority, in: transfers, raised: raised, maxConcurrentTransfers: concurrency.current)
        else { return nil }
        if mark { pausedForPriority.insert(victim.id) }
        return victim
    }

    /// An app raised `id`; returns `false` when a transfer of it is in flight already.
    mutating func raise(_ id: String) -> Bool {
        guard transfers[id] == nil else { return false }
        raised.insert(id)
        skippedUntilTrigger[id] = nil
        return true
    }

    /// A transfer could not reach the local files.
    mutating func noteLocalFilesOutOfReach() {
        if !waitingForLocalFiles { localFilesProbed = true }
        waitingForLocalFiles = true
    }

    /// A transfer completed: whether transfers waiting for the local files should run now (once).
    mutating func noteLocalFilesReached() -> Bool {
        defer { waitingForLocalFiles = false }
        return waitingForLocalFiles
    }

    /// A transfer of `id` that ran in `state` ended as `finish` says; `isSyncing` tells whether an
    /// interrupted one should wait for the next trigger (it does while sync is off).
    mutating func finished(
        _ id: String, state: AttachmentState, _ finish: TransferFinish, isSyncing: Bool
    ) {
        let transfer = transfers.removeValue(forKey: id)
        if finish != .cancelled {
            raised.remove(id)
            pausedForPriority.remove(id)
        }
        finishedTransferCount += 1
        if readsInFlight > 0 { finishedWhileReading[id] = finishedTransferCount }
        switch finish {
        case .done:
            concurrency.answered()
        case .willRetry:
            concurrency.answered()
            skippedUntilTrigger[id] = state
        case .refused:
            concurrency.refused(startedIn: transfer?.generation ?? concurrency.generation)
            skippedUntilTrigger[id] = state
        // Interrupted by stopSync: wait for the next trigger, unless sync has been started again meanwhile
        // (its first pass already ran, so nothing else would restart it).
        case .cancelled:
            if pausedForPriority.remove(id) == nil, !isSyncing { skippedUntilTrigger[id] = state }
        }
    }
}

/// How a transfer ended, as far as scheduling cares.
enum TransferFinish: Equatable, Sendable {
    /// Done, superseded, given up, or a download asked for that failed: nothing to hold back.
    case done
    /// Interrupted (stopSync, close, a newer decision).
    case cancelled
    /// Failed and will be retried: not before the next trigger.
    case willRetry
    /// Refused as overloaded (remote storage unavailable), and will be retried: not before the next
    /// trigger; the concurrency limit drops.
    case refused
}
