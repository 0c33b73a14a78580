/// The queue's life as scheduling sees it: open or closed, syncing or not, how many `syncNow` calls run,
/// whether this process holds the transfer lease, and how many calls that change records or files are in
/// progress (which `close` waits for). A sub-machine of ``QueueStateMachine``: no I/O.
struct QueueLifecycle<Waiter> {
    private(set) var isClosed = false
    /// Whether background sync is on (between `startSync` and `stopSync`).
    private(set) var isSyncing = false
    /// Whether this process holds the transfer lease (another process of the app transfers otherwise).
    private(set) var holdsLease = true
    /// Counts `stopSync` calls: a `syncNow` started before one no longer starts transfers once it returns.
    private var runGeneration = 0
    /// How many `syncNow` calls of each run generation are running.
    private var manualRounds: [Int: Int] = [:]
    /// Calls that change records or files in progress.
    private(set) var operationsInProgress = 0
    private var operationWaiters: [Waiter] = []

    /// Whether background transfers may start as far as the queue's life goes: open, holding the lease,
    /// and syncing or in a `syncNow`.
    var mayRun: Bool {
        !isClosed && holdsLease && (isSyncing || manualRounds[runGeneration, default: 0] > 0)
    }

    mutating func syncStarted() {
        isSyncing = true
    }

    /// `stopSync` begins: running `syncNow` calls stop starting transfers.
    mutating func stopRequested() {
        runGeneration += 1
        manualRounds = [:]
        isSyncing = false
    }

    /// `close` begins. Returns `false` when the queue was closed already.
    mutating func closeRequested() -> Bool {
        guard !isClosed else { return false }
        isClosed = true
        return true
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

    /// The lease was taken or lost; returns whether that changed anything.
    mutating func leaseChanged(held: Bool) -> Bool {
        guard held != holdsLease else { return false }
        holdsLease = held
        return true
    }

    mutating func operationStarted() {
        operationsInProgress += 1
    }

    /// Returns the `close` callers to release when it was the last one in progress.
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
}
