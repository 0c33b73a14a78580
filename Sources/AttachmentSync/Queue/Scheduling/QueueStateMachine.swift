/// The queue's scheduling state and every decision made on it: which transfers are in flight, which ids a
/// save holds, which failed transfers wait for the next trigger, when the queue is idle, when to wake for a
/// retry, and what the next reconcile must look at.
///
/// A plain value: no I/O, no clock reads, no suspension. ``AttachmentQueue`` feeds it events (a pass asked
/// for, records read, a transfer finished, sync stopped…) and carries out the actions it returns (start
/// these transfers, read the queued records, cancel these tasks, resume these waiters). Every race between
/// the actor's suspension points is then a sequence of events that a synchronous test can replay.
///
/// `Handle` is what the queue keeps to cancel or await a running task (`Task<Void, Never>`); `Waiter` a
/// caller suspended until the queue is idle or its operations have ended (a continuation). Tests use plain
/// values for both.
struct QueueStateMachine<Handle: Hashable & Sendable, Waiter> {
    /// A transfer in flight.
    struct Transfer {
        /// The record's state when it started: what it does (see `AttachmentQueue.TransferKind`).
        var state: AttachmentState
        /// Started by `download(attachmentId:)`: `stopSync` leaves it running. It starts whatever the
        /// concurrency bound, but takes a slot while it runs.
        var onRequest: Bool
        /// Its task, once the actor has made it (set in the same synchronous step as the decision).
        var handle: Handle?
        /// The ``AdaptiveConcurrency/generation`` it started in.
        var generation = 0
        /// What it needs from the network to keep going (see ``networkChanged(_:)``).
        var requirement = NetworkRequirement.any
        /// When it started, counted across transfers: of two equal candidates to pause, the later one goes
        /// (it has moved the least).
        var order = 0
    }

    /// What a change of the network's conditions calls for.
    struct NetworkChange: Equatable {
        /// Transfers whose requirement the new conditions no longer meet, to interrupt (they pause: they
        /// start again, resuming, when the conditions allow).
        var cancel: [Handle] = []
        /// The network came back after being unreachable.
        var regained = false
        /// Transfers that could not start may start now: run a pass.
        var improved = false
    }

    /// A read of the queued records the queue has asked for: hand it back with what was read.
    struct Read: Equatable {
        /// How many rows to read: enough to fill the free slots even when every busy or skipped record
        /// comes first.
        var limit: Int
        /// Finished transfers counted when the read was asked for: a record finished after that may be
        /// shown queued by the read although it was just transferred.
        fileprivate var finishedBefore: Int
    }

    /// What to do with the records a read returned.
    struct ReadOutcome {
        /// Transfers to start now (their slots are taken: attach each task with ``started(_:handle:)``).
        var start: [AttachmentRecord] = []
        /// A timer to make for the soonest retry time, replacing the one whose handle is given.
        var wake: Wake?
        /// Rows were dropped as possibly stale and slots are free: read again with this.
        var readAgain: Read?
        /// Callers of `syncNow` to release: nothing is in flight any more.
        var resume: [Waiter] = []
    }

    /// A timer to make: wake the queue for a pass at `time` (milliseconds since 1970), `delay` from now.
    struct Wake {
        var time: Int64
        var delay: Duration
        /// The timer it replaces, to cancel.
        var replacing: Handle?
    }

    /// How a transfer ended, as far as scheduling cares.
    enum Finish: Equatable {
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

    /// What to do once a transfer has finished.
    struct FinishOutcome {
        /// Read the queued records to start the next transfers (the read is already counted as in flight,
        /// so the queue does not look idle in between).
        var read: Read?
        /// Callers of `syncNow` to release.
        var resume: [Waiter] = []
    }

    /// What a reconcile starts from.
    struct ReconcileStart: Equatable {
        /// The ids of the previous reconciled emission, or `nil` to compare with the whole table.
        var previous: [String]?
        fileprivate var clears: Int
    }

    /// The most transfers in flight for which background transfers still start: the configured maximum,
    /// lowered while remote storage refuses as overloaded.
    private(set) var concurrency: AdaptiveConcurrency
    var maxConcurrentTransfers: Int { concurrency.current }

    private(set) var isClosed = false
    /// The network's conditions: while unreachable no transfer starts; a transfer starts only when they
    /// meet its requirement.
    private(set) var network = NetworkConditions.unrestricted
    /// Whether background sync is on (between `startSync` and `stopSync`).
    private(set) var isSyncing = false
    /// Counts `stopSync` calls: a `syncNow` started before one no longer starts transfers once it returns.
    private var runGeneration = 0
    /// How many `syncNow` calls of each run generation are running.
    private var manualRounds: [Int: Int] = [:]
    /// Transfers in flight, by attachment id: at most one per attachment.
    private(set) var transfers: [String: Transfer] = [:]
    /// Ids an app raised (``raise(_:)``): they start before any other queued transfer, pausing a
    /// lower-priority one when every slot is taken, until their transfer ends.
    private(set) var raised: Set<String> = []
    /// Transfers paused for a higher-priority one: not held back until the next trigger when they end.
    private var pausedForPriority: Set<String> = []
    private var startCount = 0
    /// Ids whose save is in progress: not transferred before their file is in place.
    private(set) var reserved: Set<String> = []
    /// While startup's background check of files runs: every id reserved or transferred since it began (and
    /// those busy when it began). Their files may be newer than what the check read, so it leaves them
    /// alone. `nil` when no check runs.
    private(set) var touchedDuringCheck: Set<String>?
    /// Ids whose transfer failed or was interrupted since the last trigger, with the state it ran in.
    private(set) var skippedUntilTrigger: [String: AttachmentState] = [:]
    private var idleWaiters: [Waiter] = []
    private var finishedTransferCount = 0
    /// Ids that finished a transfer while a read was in flight, with the count at which they finished.
    private var finishedWhileReading: [String: Int] = [:]
    private(set) var readsInFlight = 0
    /// The retry timer: its time, and its task once made.
    private(set) var retryWake: (time: Int64, handle: Handle?)?
    /// Calls that change records or files in progress, which `close` waits for.
    private(set) var operationsInProgress = 0
    /// A transfer could not reach the local files and none has completed since.
    private(set) var waitingForLocalFiles = false
    /// While ``waitingForLocalFiles``: a transfer started since the last pass began, to find out whether the
    /// files are back (see ``slotCount``).
    private var localFilesProbed = false
    private var operationWaiters: [Waiter] = []
    /// The ids of the previous emission of the watch, once reconciled (see `AttachmentQueue.reconcile`).
    private var reconciledWatch: [String]?
    /// Ids whose records the queue changed or deleted since the last reconcile read them.
    private(set) var changedSinceReconcile: Set<String> = []
    /// Counts `clearQueue` calls: a reconcile that overlapped one must not leave a baseline behind.
    private var tableClears = 0

    /// - Parameter network: The conditions until the first ``networkChanged(_:)``.
    init(maxConcurrentTransfers: Int, adaptive: Bool = true, network: NetworkConditions = .unrestricted) {
        concurrency = AdaptiveConcurrency(maximum: maxConcurrentTransfers, isEnabled: adaptive)
        self.network = network
    }

    // MARK: - Lifecycle

    /// Whether background transfers may start: the queue is open, and syncing or in a `syncNow`.
    var mayStartTransfers: Bool {
        !isClosed && holdsLease && network.isReachable
            && (isSyncing || manualRounds[runGeneration, default: 0] > 0)
    }

    /// Whether this process holds the transfer lease (another process of the app transfers otherwise).
    private(set) var holdsLease = true

    /// The lease was taken (`true`) or lost to another process (`false`): once lost, every transfer not asked
    /// for on request is to be cancelled (the other process runs them), and retried when it comes back.
    mutating func leaseChanged(held: Bool) -> [Handle] {
        guard held != holdsLease else { return [] }
        holdsLease = held
        guard !held else { return [] }
        let wake = retryWake?.handle
        retryWake = nil
        return [wake].compactMap { $0 } + cancelBackgroundTransfers()
    }

    /// Nothing in flight, and no read of the queued records in progress or about to start (which could
    /// start more).
    var isIdle: Bool { transfers.isEmpty && readsInFlight == 0 }

    mutating func syncStarted() {
        isSyncing = true
    }

    /// `stopSync` begins: running `syncNow` calls stop starting transfers, the retry timer and every
    /// transfer not asked for on request are to be cancelled (and those retried at the next trigger).
    mutating func stopRequested() -> [Handle] {
        runGeneration += 1
        manualRounds = [:]
        isSyncing = false
        let wake = retryWake?.handle
        retryWake = nil
        return [wake].compactMap { $0 } + cancelBackgroundTransfers()
    }

    /// `stopSync` ends, its background tasks finished: a pass that was reading meanwhile may have started
    /// one more transfer, to cancel too; `syncNow` callers return.
    mutating func stopFinished() -> (cancel: [Handle], resume: [Waiter]) {
        (cancelBackgroundTransfers(), takeIdleWaiters())
    }

    private mutating func cancelBackgroundTransfers() -> [Handle] {
        var handles: [Handle] = []
        for (id, transfer) in transfers where !transfer.onRequest {
            skippedUntilTrigger[id] = transfer.state
            if let handle = transfer.handle { handles.append(handle) }
        }
        return handles
    }

    /// `close` begins. Returns `false` when the queue was closed already.
    mutating func closeRequested() -> Bool {
        guard !isClosed else { return false }
        isClosed = true
        return true
    }

    /// `close`, after stopping sync: every transfer left (downloads on request too) is to be cancelled and
    /// awaited; idle waiters return.
    mutating func closeTransfers() -> (cancel: [Handle], resume: [Waiter]) {
        (transfers.values.compactMap(\.handle), takeIdleWaiters())
    }

    /// A `syncNow` begins; returns its run generation, to hand back to ``manualRoundEnded(_:)``.
    mutating func manualRoundStarted() -> Int {
        manualRounds[runGeneration, default: 0] += 1
        return runGeneration
    }

    mutating func manualRoundEnded(_ generation: Int) {
        if let rounds = manualRounds[generation] {
            manualRounds[generation] = rounds > 1 ? rounds - 1 : nil
        }
    }

    /// Parks a `syncNow` caller until the queue is idle; hands the waiter back when it need not wait.
    mutating func parkUntilIdle(_ waiter: Waiter) -> Waiter? {
        guard !isIdle, !isClosed else { return waiter }
        idleWaiters.append(waiter)
        return nil
    }

    /// The idle waiters to release, if the queue is idle now.
    mutating func resumeIfIdle() -> [Waiter] {
        isIdle ? takeIdleWaiters() : []
    }

    private mutating func takeIdleWaiters() -> [Waiter] {
        defer { idleWaiters = [] }
        return idleWaiters
    }

    // MARK: - Operations

    /// A call that changes records or files begins (after the caller checked the queue is open).
    mutating func operationStarted() {
        operationsInProgress += 1
    }

    /// A call that changes records or files ended: the `close` waiting for the last one goes on.
    mutating func operationEnded() -> [Waiter] {
        operationsInProgress -= 1
        guard operationsInProgress == 0 else { return [] }
        defer { operationWaiters = [] }
        return operationWaiters
    }

    /// Parks `close` until no operation is in progress; hands the waiter back when none is.
    mutating func parkUntilNoOperations(_ waiter: Waiter) -> Waiter? {
        guard operationsInProgress > 0 else { return waiter }
        operationWaiters.append(waiter)
        return nil
    }

    // MARK: - Saves

    /// Holds an id for a save: no transfer starts for it, no other save takes it. `false` when held.
    mutating func reserve(_ id: String) -> Bool {
        touchedDuringCheck?.insert(id)
        return reserved.insert(id).inserted
    }

    mutating func release(_ id: String) {
        reserved.remove(id)
    }

    // MARK: - Startup's background check

    /// Startup's background check of files begins: from now until ``endBackgroundCheck()``, every id
    /// reserved or transferred is remembered (see ``touchedDuringCheck``), starting with those busy now.
    mutating func beginBackgroundCheck() {
        touchedDuringCheck = reserved.union(transfers.keys)
    }

    mutating func endBackgroundCheck() {
        touchedDuringCheck = nil
    }

    // MARK: - Passes and reads

    /// A triggered pass begins: transfers that failed or were interrupted become eligible again.
    mutating func passStarted() {
        skippedUntilTrigger.removeAll()
        localFilesProbed = false
    }

    /// How many background transfers may run now: the concurrency limit; while the local files are out of
    /// reach (a locked device's protected files, an unreadable folder), one per pass, which finds out
    /// whether they are back, and none beside those already in flight: the queue is paused like an offline
    /// one, without a source to say when it may go on.
    var slotCount: Int {
        guard waitingForLocalFiles else { return maxConcurrentTransfers }
        return localFilesProbed ? 0 : 1
    }

    /// Ids made eligible again by `retry`: not held back by an earlier failure, and looked at by the next
    /// reconcile.
    mutating func retried(_ ids: [String]) {
        for id in ids {
            skippedUntilTrigger[id] = nil
            changedSinceReconcile.insert(id)
        }
    }

    /// Asks for a read of the queued records, or `nil` when no transfer may start now (sync off, or every
    /// slot taken). The read counts as in flight until handed back.
    mutating func readQueued() -> Read? {
        guard mayStartTransfers, transfers.count < slotCount else { return nil }
        return beginRead()
    }

    private mutating func beginRead() -> Read {
        readsInFlight += 1
        // On a metered network, records waiting for an unmetered one may come first: read past them.
        let waitingForNetwork = network.isUnmetered ? 0 : Self.networkReadAllowance
        return Read(
            limit: maxConcurrentTransfers + transfers.count + reserved.count + skippedUntilTrigger.count
                + waitingForNetwork,
            finishedBefore: finishedTransferCount)
    }

    /// The records `read` returned (queued, oldest first, due by `now`) and the soonest later retry time:
    /// takes the slots of those to start.
    ///
    /// A record whose transfer finished while the read was in flight may be shown still queued: it is not
    /// started again (the finished transfer asked for a fresh read itself); when that leaves free slots, a
    /// new read is asked for.
    mutating func queuedRead(
        _ read: Read, records: [AttachmentRecord], earliestRetry: Int64?, now: Int64,
        requirement: (AttachmentRecord) -> NetworkRequirement = { _ in .any }
    ) -> ReadOutcome {
        var outcome = ReadOutcome()
        // A raised record comes twice (read by id, and in the queue's order): once is enough.
        var ids: Set<String> = []
        let records = records.filter { ids.insert($0.id).inserted }
        var fresh = records.filter { (finishedWhileReading[$0.id] ?? Int.min) <= read.finishedBefore }
        if !raised.isEmpty {
            // A raised id with no queued record (nothing to transfer, or done meanwhile) is let go: the read
            // includes every queued raised record.
            raised.formIntersection(ids.union(transfers.keys))
            // Raised records first (once each), due now whatever their retry time.
            let raisedRecords = fresh.filter { raised.contains($0.id) }.map {
                var record = $0
                record.nextAttemptAt = nil
                return record
            }
            fresh = raisedRecords + fresh.filter { !raised.contains($0.id) }
        }
        if mayStartTransfers, transfers.count < slotCount {
            let network = network
            var requirements: [String: NetworkRequirement] = [:]
            let allowed = fresh.filter { record in
                let needed = requirement(record)
                requirements[record.id] = needed
                return needed.isMet(by: network)
            }
            let selected = TransferScheduler(maxConcurrentTransfers: slotCount).select(
                queued: allowed, busy: Set(transfers.keys).union(reserved), inFlight: transfers.count,
                skipped: skippedUntilTrigger, now: now)
            for record in selected {
                startCount += 1
                touchedDuringCheck?.insert(record.id)
                transfers[record.id] = Transfer(
                    state: record.state, onRequest: false, handle: nil, generation: concurrency.generation,
                    requirement: requirements[record.id] ?? .any, order: startCount)
            }
            outcome.start = selected
            if waitingForLocalFiles, !selected.isEmpty { localFilesProbed = true }
        }
        if let earliestRetry { outcome.wake = scheduleWake(at: earliestRetry, now: now) }
        if fresh.count < records.count, mayStartTransfers, transfers.count < slotCount {
            outcome.readAgain = beginRead()
        }
        endRead()
        outcome.resume = resumeIfIdle()
        return outcome
    }

    /// A read failed: nothing starts from it.
    mutating func readFailed(_ read: Read) -> [Waiter] {
        endRead()
        return resumeIfIdle()
    }

    private mutating func endRead() {
        readsInFlight -= 1
        if readsInFlight == 0 { finishedWhileReading.removeAll() }
    }

    // MARK: - Network

    /// How many more records a read takes while the network is metered or constrained, to look past those
    /// that wait for an unmetered one.
    static var networkReadAllowance: Int { 10_000 }

    /// The network's conditions changed: background transfers whose requirement they no longer meet are to
    /// be interrupted (all of them when the network is gone); when they allow more than before, a pass is
    /// due. Downloads asked for on request are left alone.
    mutating func networkChanged(_ conditions: NetworkConditions) -> NetworkChange {
        let previous = network
        network = conditions
        var change = NetworkChange()
        for transfer in transfers.values where !transfer.onRequest && !transfer.requirement.isMet(by: conditions) {
            if let handle = transfer.handle { change.cancel.append(handle) }
        }
        change.regained = !previous.isReachable && conditions.isReachable
        change.improved = change.regained || (!previous.isUnmetered && conditions.isUnmetered)
        return change
    }

    // MARK: - Transfers

    /// Attaches the task of a transfer whose slot ``queuedRead(_:records:earliestRetry:now:)`` took.
    mutating func started(_ id: String, handle: Handle) {
        transfers[id]?.handle = handle
    }

    /// Whether a download asked for may start for `id` now: no transfer in flight and no save holding it.
    func mayStartOnRequest(_ id: String) -> Bool {
        transfers[id] == nil && !reserved.contains(id)
    }

    /// A download asked for on request started (see ``mayStartOnRequest(_:)``).
    mutating func startedOnRequest(_ id: String, state: AttachmentState, handle: Handle) {
        startCount += 1
        touchedDuringCheck?.insert(id)
        transfers[id] = Transfer(
            state: state, onRequest: true, handle: handle, generation: concurrency.generation, order: startCount)
    }

    // MARK: - Priorities

    /// A transfer's priority: a download asked for on request, then a raised attachment, then this device's
    /// changes (uploads and deletes), then downloads the queue makes by itself.
    func priority(of id: String) -> Int {
        guard let transfer = transfers[id] else { return raised.contains(id) ? 3 : 0 }
        if transfer.onRequest { return 4 }
        if raised.contains(id) { return 3 }
        return transfer.state == .queuedDownload ? 1 : 2
    }

    /// The background transfer to pause so that one of `priority` can start, when every slot is taken: the
    /// lowest-priority one below it (a delete is never paused: it is quick, and has nothing to resume), the
    /// latest started among equals. `nil` when a slot is free or nothing ranks below.
    mutating func pauseTransfer(for priority: Int) -> (id: String, handle: Handle)? {
        guard let victim = transferToPause(for: priority) else { return nil }
        pausedForPriority.insert(victim.id)
        return victim
    }

    /// The transfer ``pauseTransfer(for:)`` would pause, without pausing it.
    func transferToPause(for priority: Int) -> (id: String, handle: Handle)? {
        guard transfers.count >= maxConcurrentTransfers else { return nil }
        let candidates = transfers.filter { id, transfer in
            !transfer.onRequest && transfer.state != .queuedDelete && transfer.handle != nil
                && self.priority(of: id) < priority
        }
        guard
            let victim = candidates.min(by: {
                (self.priority(of: $0.key), -$0.value.order) < (self.priority(of: $1.key), -$1.value.order)
            }), let handle = victim.value.handle
        else { return nil }
        return (victim.key, handle)
    }

    /// An app raised `id`: it starts before every other queued transfer (its retry time and an earlier
    /// failure are not waited for). Returns the transfer to pause for it when every slot is taken, and
    /// whether a read is due now to start it (a slot is free).
    mutating func raise(_ id: String) -> (pause: Handle?, read: Read?) {
        guard transfers[id] == nil else { return (nil, nil) }
        raised.insert(id)
        skippedUntilTrigger[id] = nil
        guard mayStartTransfers else { return (nil, nil) }
        if let victim = pauseTransfer(for: 3) { return (victim.handle, nil) }
        return (nil, readQueued())
    }

    /// The task of the transfer in flight for `id`, if any.
    func handle(of id: String) -> Handle? {
        transfers[id]?.handle
    }

    /// A transfer could not reach the local files (``AttachmentColumn/localUnavailable``).
    mutating func noteLocalFilesOutOfReach() {
        if !waitingForLocalFiles { localFilesProbed = true }
        waitingForLocalFiles = true
    }

    /// A transfer completed, so the local files are in reach: whether transfers waiting for them since the
    /// last such note should run now (once).
    mutating func noteLocalFilesReached() -> Bool {
        defer { waitingForLocalFiles = false }
        return waitingForLocalFiles
    }

    /// A transfer of `id` that ran in `state` ended. A failed one waits for the next trigger, as does one
    /// interrupted while sync is off; the queue asks for a fresh read to fill the slot (while transfers may
    /// start), counted as in flight from now, so a `syncNow` cannot see the queue idle before it.
    mutating func transferFinished(_ id: String, state: AttachmentState, _ finish: Finish) -> FinishOutcome {
        let transfer = transfers.removeValue(forKey: id)
        if finish != .cancelled { raised.remove(id) }
        if finish != .cancelled { pausedForPriority.remove(id) }
        changedSinceReconcile.insert(id)
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
        var outcome = FinishOutcome()
        if mayStartTransfers { outcome.read = beginRead() }
        outcome.resume = resumeIfIdle()
        return outcome
    }

    // MARK: - Retry timer

    /// Makes sure a pass runs when the soonest retry time comes, while syncing: one timer at a time,
    /// replaced only by an earlier one.
    private mutating func scheduleWake(at time: Int64, now: Int64) -> Wake? {
        guard isSyncing else { return nil }
        if let retryWake, retryWake.time <= time { return nil }
        let replacing = retryWake?.handle
        retryWake = (time, nil)
        let delay = Duration.clampedMilliseconds(max(0, time.subtractingClamped(now)))
        return Wake(time: time, delay: delay, replacing: replacing)
    }

    /// Attaches the timer made for a ``Wake``, unless a newer one replaced it meanwhile.
    mutating func wakeScheduled(at time: Int64, handle: Handle) {
        if retryWake?.time == time, retryWake?.handle == nil { retryWake?.handle = handle }
    }

    /// The timer for `time` fired.
    mutating func wakeFired(at time: Int64) {
        if retryWake?.time == time { retryWake = nil }
    }

    // MARK: - Reconcile baseline

    /// A record was changed by the queue (a commit, an eviction): the next reconcile looks at it.
    mutating func noteChanged(_ id: String) {
        changedSinceReconcile.insert(id)
    }

    /// A reconcile begins: it compares with the previous emission, which is forgotten until this one is
    /// reconciled (a failure makes the next one read everything).
    mutating func reconcileStarted() -> ReconcileStart {
        defer { reconciledWatch = nil }
        return ReconcileStart(previous: reconciledWatch, clears: tableClears)
    }

    /// The ids noted since the last reconcile read them, handed to the reconcile reading now; those noted
    /// from here on stay for the next one.
    mutating func takeChangedSinceReconcile() -> Set<String> {
        defer { changedSinceReconcile.removeAll() }
        return changedSinceReconcile
    }

    /// The emission of ids `current` is reconciled: the next compares with it, unless the table was cleared
    /// meanwhile.
    mutating func reconciled(_ start: ReconcileStart, current: [String]) {
        if start.clears == tableClears { reconciledWatch = current }
    }

    /// `clearQueue` emptied the table: the next reconcile reads everything.
    mutating func tableCleared() {
        reconciledWatch = nil
        tableClears += 1
    }
}
