import Testing

@testable import AttachmentSync

/// Each sub-machine of the queue's state machine on its own: plain values, replayed event by event.
@Suite("State machine parts")
struct SubMachineTests {
    @Test("lifecycle: transfers may run only while open, holding the lease, and syncing or in a syncNow")
    func lifecycleGatesRunning() {
        var lifecycle = QueueLifecycle<Int>()
        #expect(!lifecycle.mayRun, "neither syncing nor in a syncNow")
        let round = lifecycle.manualRoundStarted()
        #expect(lifecycle.mayRun)
        lifecycle.stopRequested()
        #expect(!lifecycle.mayRun, "stopSync ends the syncNow started before it")
        lifecycle.manualRoundEnded(round)
        lifecycle.syncStarted()
        #expect(lifecycle.mayRun)
        let lost = lifecycle.leaseChanged(held: false)
        let lostAgain = lifecycle.leaseChanged(held: false)
        #expect(lost && !lostAgain, "a change the first time only")
        #expect(!lifecycle.mayRun, "another process holds the lease")
        let taken = lifecycle.leaseChanged(held: true)
        let closing = lifecycle.closeRequested()
        let closingAgain = lifecycle.closeRequested()
        #expect(taken && closing && !closingAgain)
        #expect(!lifecycle.mayRun, "closed")
    }

    @Test("lifecycle: close waits for the last operation in progress, and only for it")
    func lifecycleOperations() {
        var lifecycle = QueueLifecycle<Int>()
        #expect(lifecycle.parkUntilNoOperations(1) == 1, "nothing in progress: close goes on")
        lifecycle.operationStarted()
        lifecycle.operationStarted()
        #expect(lifecycle.parkUntilNoOperations(2) == nil)
        let first = lifecycle.operationEnded()
        let last = lifecycle.operationEnded()
        #expect(first.isEmpty, "one is still in progress")
        #expect(last == [2])
        #expect(lifecycle.operationsInProgress == 0)
    }

    @Test("retry timer: one at a time, replaced only by an earlier one; a replaced timer firing changes nothing")
    func retryTimer() throws {
        var timer = RetryTimer<Int>()
        let scheduled = timer.schedule(at: 5_000, now: 1_000)
        let first = try #require(scheduled)
        #expect(first.delay == .seconds(4) && first.replacing == nil)
        timer.scheduled(at: 5_000, handle: 1)
        let later = timer.schedule(at: 6_000, now: 1_000)
        #expect(later == nil, "a later time keeps the timer")
        let replacing = timer.schedule(at: 3_000, now: 2_000)
        let earlier = try #require(replacing)
        #expect(earlier.replacing == 1 && earlier.delay == .seconds(1))
        timer.scheduled(at: 5_000, handle: 9)
        #expect(timer.time == 3_000, "the replaced timer's handle is not attached to the new time")
        timer.fired(at: 5_000)
        #expect(timer.time == 3_000, "the replaced timer firing late changes nothing")
        timer.scheduled(at: 3_000, handle: 2)
        let cancelled = timer.cancel()
        #expect(cancelled == 2)
        #expect(timer.time == nil)
        let past = timer.schedule(at: 100, now: 1_000)
        #expect(past?.delay == .zero, "a time already past wakes at once")
    }

    @Test("reconcile baseline: a reconcile that overlapped a clear leaves no baseline; a failed one forgets it")
    func reconcileBaseline() {
        var baseline = ReconcileBaseline()
        let first = baseline.started()
        #expect(first.previous == nil, "the first reconcile reads everything")
        baseline.reconciled(first, current: ["a", "b"])
        baseline.noteChanged("c")
        let second = baseline.started()
        #expect(second.previous == ["a", "b"])
        let changed = baseline.takeChanged()
        let again = baseline.takeChanged()
        #expect(changed == ["c"])
        #expect(again.isEmpty, "handed over once")
        // The second reconcile failed (never reconciled): the next one reads everything.
        let third = baseline.started()
        #expect(third.previous == nil)
        baseline.tableCleared()
        baseline.reconciled(third, current: ["x"])
        let afterClear = baseline.started()
        #expect(afterClear.previous == nil, "a clear during the reconcile leaves no baseline")
    }

    @Test("startup ledger: only ids touched while a check runs are remembered, busy ones included")
    func startupLedger() {
        var ledger = StartupLedger()
        ledger.note("before")
        #expect(ledger.touched == nil)
        ledger.begin(busy: ["busy"])
        ledger.note("saved")
        #expect(ledger.touched == ["busy", "saved"])
        ledger.end()
        #expect(ledger.touched == nil)
    }

    @Test("priorities: asked for, raised, this device's changes, then the queue's own downloads; deletes never paused")
    func priorities() {
        typealias P = TransferPriority<Int>
        let transfers: [String: P.Transfer] = [
            "asked": P.Transfer(state: .synced, onRequest: true, handle: 1, order: 1),
            "up": P.Transfer(state: .queuedUpload, onRequest: false, handle: 2, order: 2),
            "down1": P.Transfer(state: .queuedDownload, onRequest: false, handle: 3, order: 3),
            "down2": P.Transfer(state: .queuedDownload, onRequest: false, handle: 4, order: 4),
            "delete": P.Transfer(state: .queuedDelete, onRequest: false, handle: 5, order: 5),
        ]
        #expect(P.priority(of: "asked", in: transfers, raised: []) == 4)
        #expect(P.priority(of: "down1", in: transfers, raised: ["down1"]) == 3)
        #expect(P.priority(of: "up", in: transfers, raised: []) == 2)
        #expect(P.priority(of: "down1", in: transfers, raised: []) == 1)
        #expect(P.priority(of: "none", in: transfers, raised: []) == 0)
        let victim = P.transferToPause(for: 3, in: transfers, raised: [], maxConcurrentTransfers: 5)
        #expect(victim?.id == "down2", "the lowest, latest started goes")
        #expect(
            P.transferToPause(for: 3, in: transfers, raised: [], maxConcurrentTransfers: 6) == nil, "a slot is free")
        let onlyDelete = transfers.filter { $0.key == "delete" }
        #expect(P.transferToPause(for: 4, in: onlyDelete, raised: [], maxConcurrentTransfers: 1) == nil)
    }
}
