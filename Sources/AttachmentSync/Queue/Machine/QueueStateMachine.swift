/// The queue's scheduling state and every decision made on it: which transfers are in flight, which ids a
/// save holds, which failed transfers wait for the next trigger, what becomes of a failed transfer, when
/// the queue is idle, when to wake for a retry, and what the next reconcile must look at.
///
/// A plain value: no I/O, no clock reads, no suspension, and its state private. Each concern is a sub-machine
/// with its own tests (``TransferSlots``, ``TransferPriority``, ``QueueLifecycle``, ``RetryTimer``,
/// ``ReconcileBaseline``, ``StartupLedger``, ``FailurePolicy``). ``AttachmentQueue`` feeds it events; each
/// returns the ``Action``s it calls for, which one runner carries out (`AttachmentQueue.run(_:)`), so every
/// race between the actor's suspension points is a sequence of events a synchronous test can replay.
/// `Handle` is what the queue keeps to cancel or await a task, `Waiter` a suspended caller (a continuation).
struct QueueStateMachine<Handle: Hashable & Sendable, Waiter> {
    // MARK: - State (private: events change it, queries read it)

    private var lifecycle = QueueLifecycle<Waiter>()
    private var slots: TransferSlots<Handle>
    private var retryTimer = RetryTimer<Handle>()
    private var baseline = ReconcileBaseline()
    private var ledger = StartupLedger()
    private var onDemand = OnDemandDownloads()
    /// Decides what becomes of a failed transfer (configuration, not state).
    let failures: FailurePolicy
    private var idleWaiters: [Waiter] = []

    /// - Parameters:
    ///   - network: The conditions until the first ``networkChanged(_:)``.
    ///   - failures: The retry and give-up rules of failed transfers.
    init(
        maxConcurrentTransfers: Int, adaptive: Bool = true, network: NetworkConditions = .unrestricted,
        failures: FailurePolicy = FailurePolicy(retryBackoff: RetryBackoff(), maxAttempts: nil)
    ) {
        slots = TransferSlots(
            concurrency: AdaptiveConcurrency(maximum: maxConcurrentTransfers, isEnabled: adaptive), network: network)
        self.failures = failures
    }

    // MARK: - Queries

    /// The concurrency limit now (see ``AdaptiveConcurrency``).
    var maxConcurrentTransfers: Int { slots.concurrency.current }
    var isClosed: Bool { lifecycle.isClosed }
    var holdsLease: Bool { lifecycle.holdsLease }
    var operationsInProgress: Int { lifecycle.operationsInProgress }
    /// How many transfers are in flight.
    var transferCount: Int { slots.transfers.count }
    /// The ids of the transfers in flight.
    var transferIDs: Set<String> { Set(slots.transfers.keys) }
    /// Whether a transfer of `id` is in flight.
    func isTransferring(_ id: String) -> Bool { slots.transfers[id] != nil }
    /// The task of the transfer in flight for `id`, if any.
    func handle(of id: String) -> Handle? { slots.transfers[id]?.handle }
    /// The tasks of the transfers in flight, by attachment id.
    var transferHandles: [String: Handle] { slots.transfers.compactMapValues(\.handle) }
    /// The ids saves hold.
    var reservedIDs: Set<String> { slots.reserved }
    /// The records that cannot start a transfer now: in flight, or reserved.
    var busyIDs: Set<String> { slots.reserved.union(slots.transfers.keys) }
    /// The ids an app raised, whose transfers have not ended.
    var raisedIDs: Set<String> { slots.raised }
    /// The ids saves or transfers touched since startup's background check began (`nil` when none runs).
    var touchedDuringCheck: Set<String>? { ledger.touched }
    /// The time of the retry timer asked for, if any (milliseconds since 1970).
    var retryWakeTime: Int64? { retryTimer.time }
    /// How many reads of the queued records are in flight.
    var readsInFlight: Int { slots.readsInFlight }
    /// The state a transfer of `id` that waits for the next trigger ran in, if it waits.
    func waitingForTrigger(_ id: String) -> AttachmentState? { slots.skippedUntilTrigger[id] }

    /// Whether background transfers may start: the queue is open, holds the lease, the network is
    /// reachable, and it is syncing or in a `syncNow`.
    var mayStartTransfers: Bool { lifecycle.mayRun && slots.network.isReachable }

    /// Nothing in flight, and no read of the queued records in progress or about to start (which could
    /// start more).
    var isIdle: Bool { slots.isIdle }

    // MARK: - Lifecycle

    /// The lease was taken (`true`) or lost to another process (`false`): once lost, every transfer not asked
    /// for on request is to be cancelled (the other process runs them), and retried when it comes back.
    mutating func leaseChanged(held: Bool) -> [Action] {
        guard lifecycle.leaseChanged(held: held), !held else { return [] }
        return [.cancel([retryTimer.cancel()].compactMap { $0 } + slots.cancelBackgroundTransfers())]
    }

    mutating func syncStarted() { lifecycle.syncStarted() }
    /// `stopSync` begins: running `syncNow` calls stop starting transfers, the retry timer and every
    /// transfer not asked for on request are to be cancelled (and those retried at the next trigger).
    mutating func stopRequested() -> [Action] {
        lifecycle.stopRequested()
        return [.cancel([retryTimer.cancel()].compactMap { $0 } + slots.cancelBackgroundTransfers())]
    }

    /// `stopSync` ends, its background tasks finished: a pass that was reading meanwhile may have started
    /// one more transfer, to cancel too; `syncNow` callers return.
    mutating func stopFinished() -> [Action] {
        [.cancel(slots.cancelBackgroundTransfers()), .resume(takeIdleWaiters())]
    }

    /// `close` begins. Returns `false` when the queue was closed already.
    mutating func closeRequested() -> Bool { lifecycle.closeRequested() }

    /// `close`, after stopping sync: every transfer left (downloads on request too) is to be cancelled and
    /// awaited (`close` awaits the tasks itself); idle waiters return.
    mutating func closeTransfers() -> (cancel: [Handle], actions: [Action]) {
        let handles = slots.transfers.values.compactMap(\.handle)
        return (handles, [.cancel(handles), .resume(takeIdleWaiters())])
    }

    /// A `syncNow` begins; returns its run generation, to hand back to ``manualRoundEnded(_:)``.
    mutating func manualRoundStarted() -> Int { lifecycle.manualRoundStarted() }
    mutating func manualRoundEnded(_ generation: Int) { lifecycle.manualRoundEnded(generation) }

    /// Parks a `syncNow` caller until the queue is idle; hands the waiter back when it need not wait.
    mutating func parkUntilIdle(_ waiter: Waiter) -> Waiter? {
        guard !isIdle, !lifecycle.isClosed else { return waiter }
        idleWaiters.append(waiter)
        return nil
    }

    /// Releases the idle waiters, if the queue is idle now.
    mutating func resumeIfIdle() -> [Action] { isIdle ? [.resume(takeIdleWaiters())] : [] }

    private mutating func takeIdleWaiters() -> [Waiter] {
        defer { idleWaiters = [] }
        return idleWaiters
    }

    // MARK: - Operations (calls that change records or files, which `close` waits for)

    mutating func operationStarted() { lifecycle.operationStarted() }
    mutating func operationEnded() -> [Action] { [.resume(lifecycle.operationEnded())] }
    mutating func parkUntilNoOperations(_ waiter: Waiter) -> Waiter? { lifecycle.parkUntilNoOperations(waiter) }

    // MARK: - Saves and startup's background check

    /// Holds an id for a save: no transfer starts for it, no other save takes it. `false` when held.
    mutating func reserve(_ id: String) -> Bool {
        ledger.note(id)
        return slots.reserve(id)
    }

    mutating func release(_ id: String) { slots.release(id) }

    /// Startup's background check of files begins: from now until ``endBackgroundCheck()``, every id
    /// reserved or transferred is remembered (see ``touchedDuringCheck``), starting with those busy now.
    mutating func beginBackgroundCheck() { ledger.begin(busy: slots.reserved.union(slots.transfers.keys)) }

    mutating func endBackgroundCheck() { ledger.end() }

    // MARK: - Retry timer (see ``RetryTimer``)

    mutating func wakeScheduled(at time: Int64, handle: Handle) { retryTimer.scheduled(at: time, handle: handle) }
    mutating func wakeFired(at time: Int64) { retryTimer.fired(at: time) }

    // MARK: - Reconcile baseline (see ``ReconcileBaseline``)

    /// The queue changed a record (commit, eviction, adoption): the next reconcile and the background check heed it.
    mutating func noteChanged(_ id: String) {
        baseline.noteChanged(id)
        ledger.note(id)
    }
    /// The ids the next reconcile looks at besides the emission's changes.
    var changedSinceReconcile: Set<String> { baseline.changed }
    mutating func reconcileStarted() -> ReconcileStart { baseline.started() }
    mutating func takeChangedSinceReconcile() -> Set<String> { baseline.takeChanged() }
    mutating func reconciled(_ start: ReconcileStart, current: [String]) {
        baseline.reconciled(start, current: current)
    }
    /// `clearQueue` emptied the table: the next reconcile reads everything.
    mutating func tableCleared() { baseline.tableCleared() }

    // MARK: - Passes and reads

    /// A triggered pass begins: transfers that failed or were interrupted become eligible again.
    mutating func passStarted() { slots.passStarted() }

    /// Ids made eligible again by `retry`: not held back by an earlier failure, and looked at by the next
    /// reconcile.
    mutating func retried(_ ids: [String]) {
        slots.retried(ids)
        for id in ids { baseline.noteChanged(id) }
    }

    /// Asks for a read of the queued records, unless no transfer may start now (sync off, or every slot
    /// taken). The read counts as in flight until handed back.
    mutating func readQueued() -> [Action] {
        guard mayStartTransfers, slots.hasFreeSlot else { return [] }
        return [.readQueued(beginRead())]
    }

    private mutating func beginRead() -> Read {
        let (limit, finishedBefore) = slots.beginRead()
        return Read(limit: limit, finishedBefore: finishedBefore)
    }

    /// The records `read` returned (queued, oldest first, due by `now`) and the soonest later retry time:
    /// takes the slots of those to start. A record whose transfer finished while the read was in flight is
    /// not started again (that transfer asked for a fresh read itself); when that frees slots, a new read is.
    mutating func recordsRead(
        _ read: Read, records: [AttachmentRecord], earliestRetry: Int64?, now: Int64,
        requirement: (AttachmentRecord) -> NetworkRequirement = { _ in .any }
    ) -> [Action] {
        var actions: [Action] = []
        let (fresh, dropped) = slots.fresh(records, finishedBefore: read.finishedBefore)
        if mayStartTransfers, slots.hasFreeSlot {
            let selected = slots.start(from: fresh, now: now, requirement: requirement)
            for record in selected { ledger.note(record.id) }
            if !selected.isEmpty { actions.append(.startTransfers(selected)) }
        }
        if let earliestRetry, lifecycle.isSyncing, let wake = retryTimer.schedule(at: earliestRetry, now: now) {
            actions.append(.scheduleWake(wake))
        }
        if dropped, mayStartTransfers, slots.hasFreeSlot { actions.append(.readQueued(beginRead())) }
        slots.endRead()
        return actions + resumeIfIdle()
    }

    /// A read failed: nothing starts from it.
    mutating func readFailed(_ read: Read) -> [Action] {
        slots.endRead()
        return resumeIfIdle()
    }

    // MARK: - Network

    /// The network's conditions changed: background transfers whose requirement they no longer meet are to
    /// be interrupted (all of them when the network is gone); when they allow more than before, a pass is
    /// due. Downloads asked for on request are left alone.
    mutating func networkChanged(_ conditions: NetworkConditions) -> NetworkChange {
        let (cancel, regained, improved) = slots.networkChanged(conditions)
        return NetworkChange(actions: cancel.isEmpty ? [] : [.cancel(cancel)], regained: regained, improved: improved)
    }

    // MARK: - Transfers

    /// Attaches the task of a transfer that ``recordsRead(_:records:earliestRetry:now:requirement:)`` started.
    mutating func started(_ id: String, handle: Handle) { slots.started(id, handle: handle) }

    /// Whether a download asked for may start for `id` now: no transfer in flight and no save holding it.
    func mayStartOnRequest(_ id: String) -> Bool { slots.transfers[id] == nil && !slots.reserved.contains(id) }

    /// A download asked for on request started (`.start` of ``downloadAsked(_:record:)``, or a repair).
    mutating func startedOnRequest(_ id: String, state: AttachmentState, handle: Handle) {
        ledger.note(id)
        slots.startedOnRequest(id, state: state, handle: handle)
    }

    // MARK: - Downloads asked for (see ``OnDemandDownloads``)

    /// `download(attachmentId:)` read `record` of `id`: what it does now (see ``OnDemandDownloads``).
    mutating func downloadAsked(_ id: String, record: AttachmentRecord?) -> DownloadStep {
        onDemand.asked(id, record: record, slots: &slots)
    }

    /// The caller with `token` stopped waiting for the download of `id`: the last one leaving cancels it.
    mutating func downloadWaiterLeft(_ token: Int, of id: String) -> [Action] {
        guard onDemand.leave(token, of: id), let handle = slots.transfers[id]?.handle else { return [] }
        return [.cancel([handle])]
    }

    /// The download of `id` asked for ended: the tokens of the callers to hand its result.
    mutating func downloadEnded(_ id: String) -> [Int] { onDemand.ended(id) }

    /// How many callers wait for the download of `id` asked for.
    func downloadWaiterCount(of id: String) -> Int { onDemand.waiterCount(of: id) }

    /// A transfer's priority (see ``TransferPriority/priority(of:in:raised:)``).
    func priority(of id: String) -> Int { TransferPriority.priority(of: id, in: slots.transfers, raised: slots.raised) }

    /// The background transfer a transfer of `priority` would pause (see ``TransferPriority``).
    func transferToPause(for priority: Int) -> (id: String, handle: Handle)? {
        TransferPriority.transferToPause(
            for: priority, in: slots.transfers, raised: slots.raised, maxConcurrentTransfers: maxConcurrentTransfers)
    }

    /// An app raised `id`: it starts before every other queued transfer (its retry time and an earlier
    /// failure are not waited for). Pauses a lower-priority transfer when every slot is taken, or asks for
    /// a read to start it when a slot is free.
    mutating func raise(_ id: String) -> [Action] {
        guard slots.raise(id), mayStartTransfers else { return [] }
        if let victim = slots.pauseTransfer(for: 3) { return [.cancel([victim.handle])] }
        return readQueued()
    }

    /// A transfer completed, so the local files are in reach: whether transfers waiting for them since the
    /// last such note should run now (once).
    mutating func noteLocalFilesReached() -> Bool { slots.noteLocalFilesReached() }

    // MARK: - Finished transfers

    /// A transfer could not reach the local files: the queue's transfers pause (see ``TransferSlots/slotCount``).
    mutating func noteLocalFilesOutOfReach() { slots.noteLocalFilesOutOfReach() }

    /// A transfer of `id` that ran in `state` ended. A failed one waits for the next trigger, as does one
    /// interrupted while sync is off; the queue asks for a fresh read to fill the slot (while transfers may
    /// start), counted as in flight from now, so a `syncNow` cannot see the queue idle before it.
    mutating func transferFinished(_ id: String, state: AttachmentState, _ finish: Finish) -> [Action] {
        slots.finished(id, state: state, finish, isSyncing: lifecycle.isSyncing)
        baseline.noteChanged(id)
        return (mayStartTransfers ? [.readQueued(beginRead())] : []) + resumeIfIdle()
    }
}
