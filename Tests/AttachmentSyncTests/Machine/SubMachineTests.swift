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

    @Test("downloads asked for: callers share one download; the last to leave abandons it; its end hands out the rest")
    func onDemandWaiters() {
        var downloads = OnDemandDownloads()
        let first = downloads.join("v")
        let second = downloads.join("v")
        #expect(downloads.waiterCount(of: "v") == 2)
        let abandoned = downloads.leave(first, of: "v")
        #expect(!abandoned, "one caller still waits")
        let abandonedAgain = downloads.leave(first, of: "v")
        #expect(!abandonedAgain, "leaving twice changes nothing")
        #expect(downloads.isWanted("v"))
        let third = downloads.join("v")
        let handedOut = downloads.ended("v")
        #expect(handedOut == [second, third], "every caller still waiting gets the result")
        #expect(!downloads.isInFlight("v"))
        let lone = downloads.join("w")
        let lastLeft = downloads.leave(lone, of: "w")
        #expect(lastLeft, "the last caller leaving abandons the download")
        #expect(downloads.isInFlight("w") && !downloads.isWanted("w"))
        let leftOver = downloads.ended("w")
        #expect(leftOver.isEmpty)
    }

    @Test("downloads asked for: each record and slot state leads to the step the call takes")
    func onDemandSteps() {
        func record(_ state: AttachmentState, local: Bool = false) -> AttachmentRecord {
            AttachmentRecord(id: "v", filename: "v.jpg", state: state, timestamp: 0, localPath: local ? "v.jpg" : nil)
        }
        var downloads = OnDemandDownloads()
        var slots = TransferSlots<Int>(
            concurrency: AdaptiveConcurrency(maximum: 1, isEnabled: false), network: .unrestricted)
        var tokens: [Int] = []
        func ask(_ record: AttachmentRecord?) -> String {
            switch downloads.asked("v", record: record, slots: &slots) {
            case .present: return "present"
            case .join(let token):
                tokens.append(token)
                return "join"
            case .awaitTransfer(let handle): return "await \(handle)"
            case .start(_, let token, let pausing):
                tokens.append(token)
                return "start pausing \(pausing)"
            case .refuse(let refusal): return "refuse \(refusal)"
            }
        }

        #expect(ask(nil) == "refuse notFound")
        #expect(ask(record(.queuedDelete)) == "refuse beingDeleted")
        #expect(ask(record(.synced, local: true)) == "present")
        _ = slots.reserve("v")
        #expect(ask(record(.synced)) == "refuse beingSaved")
        slots.release("v")
        _ = slots.networkChanged(.offline)
        #expect(ask(record(.synced)) == "refuse networkUnreachable")
        _ = slots.networkChanged(.unrestricted)

        slots.startedOnRequest("other", state: .synced, handle: 7)
        #expect(ask(record(.synced)) == "start pausing []", "a download asked for never pauses another")
        slots.startedOnRequest("v", state: .synced, handle: 8)
        #expect(ask(record(.synced)) == "join")
        #expect(Set(tokens).count == 2, "each caller has its own token")
        let firstLeft = downloads.leave(tokens[0], of: "v")
        #expect(!firstLeft)
        let lastLeft = downloads.leave(tokens[1], of: "v")
        #expect(lastLeft, "the last caller leaving abandons it")
        #expect(ask(record(.synced)) == "await 8", "an abandoned download is waited out, not joined")
        let leftOver = downloads.ended("v")
        #expect(leftOver.isEmpty)
        #expect(ask(record(.queuedUpload)) == "await 8", "another transfer of the attachment is waited for")
    }

    @Test("downloads asked for: when every slot is taken, the lowest-priority background transfer pauses")
    func onDemandPauses() {
        var downloads = OnDemandDownloads()
        var slots = TransferSlots<Int>(
            concurrency: AdaptiveConcurrency(maximum: 2, isEnabled: false), network: .unrestricted)
        let queued = [
            AttachmentRecord(id: "up", filename: "up.jpg", state: .queuedUpload, timestamp: 0),
            AttachmentRecord(id: "down", filename: "down.jpg", state: .queuedDownload, timestamp: 0),
        ]
        _ = slots.beginRead()
        let started = slots.start(from: queued, now: 0, requirement: { _ in .any }).count
        #expect(started == 2)
        slots.endRead()
        slots.started("up", handle: 1)
        slots.started("down", handle: 2)
        let step = downloads.asked(
            "v", record: AttachmentRecord(id: "v", filename: "v.jpg", state: .synced, timestamp: 0), slots: &slots)
        guard case .start(_, _, let pausing) = step else {
            Issue.record("a download asked for starts, not \(step)")
            return
        }
        #expect(pausing == [2], "the queue's own download pauses before an upload")
    }
}
