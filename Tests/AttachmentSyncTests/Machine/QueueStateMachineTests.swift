import TestSupport
import Testing

@testable import AttachmentSync

/// The queue's scheduling decisions, replayed as sequences of events without any task, clock or database:
/// handles and waiters are plain numbers.
@Suite("Queue state machine (pure)")
struct QueueStateMachineTests {
    typealias Machine = QueueStateMachine<Int, Int>

    /// `#require` for values made by mutating calls (the macro cannot take those).
    func unwrap<T>(_ value: T?, sourceLocation: SourceLocation = #_sourceLocation) throws -> T {
        try #require(value, sourceLocation: sourceLocation)
    }

    func queued(_ id: String, _ state: AttachmentState = .queuedUpload, at timestamp: Int64 = 1) -> AttachmentRecord {
        AttachmentRecord(id: id, filename: "\(id).jpg", state: state, timestamp: timestamp, localPath: "\(id).jpg")
    }

    /// A syncing machine that has started transfers for `ids` (handles 1, 2, …).
    func syncing(bound: Int = 4, running ids: [String] = []) throws -> Machine {
        var machine = Machine(maxConcurrentTransfers: bound)
        machine.syncStarted()
        guard !ids.isEmpty else { return machine }
        let read = try unwrap(machine.readQueued().read)
        let outcome = machine.recordsRead(read, records: ids.map { queued($0) }, earliestRetry: nil, now: 0)
        #expect(outcome.start.map(\.id) == ids)
        for (index, id) in ids.enumerated() { machine.started(id, handle: index + 1) }
        return machine
    }

    @Test("nothing is read or started while sync is off and no syncNow runs")
    func noReadWhenStopped() throws {
        var machine = Machine(maxConcurrentTransfers: 2)
        #expect(machine.readQueued().read == nil)
        let generation = machine.manualRoundStarted()
        #expect(machine.readQueued().read != nil, "a syncNow reads")
        machine.manualRoundEnded(generation)
        #expect(machine.mayStartTransfers == false)
    }

    @Test("a read takes slots up to the bound, one transfer per id, reserved ids left alone")
    func readFillsSlots() throws {
        var machine = try syncing(bound: 3)
        let first = machine.reserve("saving")
        let second = machine.reserve("saving")
        #expect(first && !second, "one save per id")
        let read = try unwrap(machine.readQueued().read)
        #expect(read.limit == 3 + 0 + 1 + 0)
        let records = ["saving", "a", "a", "b", "c", "d"].map { queued($0) }
        let outcome = machine.recordsRead(read, records: records, earliestRetry: nil, now: 0)
        #expect(outcome.start.map(\.id) == ["a", "b", "c"])
        #expect(machine.transferCount == 3)
        #expect(machine.readQueued().read == nil, "the bound is full: no read")
        #expect(outcome.read == nil)
    }

    // The race fixed in 120ad02: between a transfer leaving the table and the read that starts the next
    // ones, a `syncNow` waiting for idle must not be released.
    @Test("a finished transfer's follow-up read keeps syncNow waiting until it has started the next ones")
    func followUpReadKeepsQueueBusy() throws {
        var machine = try syncing(bound: 1, running: ["a"])
        #expect(machine.parkUntilIdle(7) == nil, "syncNow parks while 'a' runs")
        let finish = machine.transferFinished("a", state: .queuedUpload, .done)
        #expect(finish.resume.isEmpty, "not idle: the follow-up read is in flight")
        #expect(machine.isIdle == false)
        #expect(machine.resumeIfIdle().resume.isEmpty)
        let read = try #require(finish.read)
        let outcome = machine.recordsRead(read, records: [queued("b")], earliestRetry: nil, now: 0)
        #expect(outcome.start.map(\.id) == ["b"])
        #expect(outcome.resume.isEmpty, "'b' runs now")
        machine.started("b", handle: 2)
        let last = machine.transferFinished("b", state: .queuedUpload, .done)
        let lastOutcome = machine.recordsRead(try #require(last.read), records: [], earliestRetry: nil, now: 0)
        #expect(lastOutcome.resume == [7], "released once nothing is in flight or being read")
    }

    // The race `finishedWhileReading` guards: a read in flight when a transfer commits may still list the
    // record as queued; starting it again would upload twice (or download over a committed file).
    @Test("a record that finished while a read was in flight is not started again from that read")
    func staleReadDoesNotRestart() throws {
        var machine = try syncing(bound: 2, running: ["a"])
        let read = try unwrap(machine.readQueued().read)  // a pass reads; its snapshot still shows "a" queued
        let finish = machine.transferFinished("a", state: .queuedUpload, .done)
        let stale = machine.recordsRead(read, records: [queued("a"), queued("b")], earliestRetry: nil, now: 0)
        #expect(stale.start.map(\.id) == ["b"], "'a' finished after the read began: not started again")
        #expect(stale.read != nil, "a row was dropped and a slot is free: read again")
        // The follow-up read of the finished transfer, taken after its commit, no longer lists "a".
        let fresh = machine.recordsRead(try #require(finish.read), records: [queued("b")], earliestRetry: nil, now: 0)
        #expect(fresh.start.isEmpty, "'b' already runs")
        // A read asked for after the finish may start "a" again if it is queued again (a new state).
        let later = machine.recordsRead(
            try #require(stale.read), records: [queued("a", .queuedDelete)], earliestRetry: nil, now: 0)
        #expect(later.start.map(\.id) == ["a"])
    }

    // The race fixed in b993568: a transfer interrupted by stopSync that ends after sync was started again
    // must be restarted by its own follow-up read (the new sync's first pass ran while it was still busy).
    @Test("a transfer cancelled by stopSync and ending after startSync is read again and restarted")
    func cancelledAfterRestart() throws {
        var machine = try syncing(bound: 2, running: ["a"])
        #expect(machine.stopRequested().cancel == [1])
        #expect(machine.waitingForTrigger("a") == .queuedUpload)
        _ = machine.stopFinished()
        machine.syncStarted()
        machine.passStarted()  // the new sync's first pass: "a" is still busy, nothing starts
        let passRead = try unwrap(machine.readQueued().read)
        let pass = machine.recordsRead(passRead, records: [queued("a")], earliestRetry: nil, now: 0)
        #expect(pass.start.isEmpty)
        let finish = machine.transferFinished("a", state: .queuedUpload, .cancelled)
        #expect(machine.waitingForTrigger("a") == nil, "syncing again: not held back")
        let outcome = machine.recordsRead(try #require(finish.read), records: [queued("a")], earliestRetry: nil, now: 0)
        #expect(outcome.start.map(\.id) == ["a"])
    }

    @Test("a transfer cancelled while sync is off waits for the next trigger")
    func cancelledWhileStopped() throws {
        var machine = try syncing(running: ["a"])
        _ = machine.stopRequested()
        _ = machine.stopFinished()
        let finish = machine.transferFinished("a", state: .queuedDownload, .cancelled)
        #expect(finish.read == nil, "sync is off: no follow-up read")
        #expect(machine.waitingForTrigger("a") == .queuedDownload)
        let generation = machine.manualRoundStarted()
        let roundRead = try unwrap(machine.readQueued().read)
        let skipped = machine.recordsRead(
            roundRead, records: [queued("a", .queuedDownload)], earliestRetry: nil, now: 0)
        #expect(skipped.start.isEmpty, "held back within the round")
        machine.passStarted()
        let triggerRead = try unwrap(machine.readQueued().read)
        let retried = machine.recordsRead(
            triggerRead, records: [queued("a", .queuedDownload)], earliestRetry: nil, now: 0)
        #expect(retried.start.map(\.id) == ["a"], "the next trigger retries it")
        machine.manualRoundEnded(generation)
    }

    @Test("a failed transfer is retried at the next trigger, and a record that moved to another state at once")
    func failedWaitsForTrigger() throws {
        var machine = try syncing(running: ["a", "b"])
        _ = machine.transferFinished("a", state: .queuedUpload, .willRetry)
        let finish = machine.transferFinished("b", state: .queuedUpload, .willRetry)
        let outcome = machine.recordsRead(
            try #require(finish.read), records: [queued("a"), queued("b", .queuedDelete)], earliestRetry: nil, now: 0)
        #expect(outcome.start.map(\.id) == ["b"], "'b' is now a delete: not held back by its failed upload")
    }

    @Test("stopSync cancels background transfers and the retry timer, leaves downloads on request running")
    func stopLeavesOnRequest() throws {
        var machine = try syncing(running: ["a"])
        #expect(machine.mayStartOnRequest("v"))
        machine.startedOnRequest("v", state: .synced, handle: 9)
        #expect(!machine.mayStartOnRequest("v"))
        let read = try unwrap(machine.readQueued().read)
        let outcome = machine.recordsRead(read, records: [], earliestRetry: 5_000, now: 1_000)
        #expect(outcome.wake?.delay == .seconds(4))
        machine.wakeScheduled(at: 5_000, handle: 20)
        let cancelled = machine.stopRequested().cancel
        #expect(Set(cancelled) == [1, 20])
        #expect(machine.retryWakeTime == nil)
        #expect(machine.isTransferring("v"))
        let late = machine.stopFinished().cancel
        #expect(late == [1], "a transfer still winding down is cancelled again, never the download asked for")
        let closing = machine.closeRequested()
        let again = machine.closeRequested()
        #expect(closing && !again, "closing twice is harmless")
        #expect(Set(machine.closeTransfers().cancel) == [1, 9])
    }

    @Test("one retry timer: an earlier time replaces it, a later one does not, none while stopped")
    func retryTimer() throws {
        var machine = try syncing()
        var read = try unwrap(machine.readQueued().read)
        let first = try unwrap(machine.recordsRead(read, records: [], earliestRetry: 10_000, now: 0).wake)
        #expect(first.time == 10_000 && first.replacing == nil)
        machine.wakeScheduled(at: 10_000, handle: 1)
        read = try unwrap(machine.readQueued().read)
        #expect(machine.recordsRead(read, records: [], earliestRetry: 20_000, now: 0).wake == nil)
        read = try unwrap(machine.readQueued().read)
        let earlier = try unwrap(machine.recordsRead(read, records: [], earliestRetry: 3_000, now: 1_000).wake)
        #expect(earlier.replacing == 1 && earlier.delay == .seconds(2))
        machine.wakeScheduled(at: 3_000, handle: 2)
        machine.wakeFired(at: 10_000)
        #expect(machine.retryWakeTime == 3_000, "a replaced timer firing late changes nothing")
        machine.wakeFired(at: 3_000)
        #expect(machine.retryWakeTime == nil)
        read = try unwrap(machine.readQueued().read)
        let past = try unwrap(machine.recordsRead(read, records: [], earliestRetry: 500, now: 1_000).wake)
        #expect(past.delay == .zero, "a time already past wakes at once")
        _ = machine.stopRequested()
        let generation = machine.manualRoundStarted()
        read = try unwrap(machine.readQueued().read)
        #expect(
            machine.recordsRead(read, records: [], earliestRetry: 2_000, now: 0).wake == nil, "no timer unless syncing")
        machine.manualRoundEnded(generation)
    }

    @Test("a syncNow from before stopSync starts nothing more; one after it does")
    func runGenerations() throws {
        var machine = Machine(maxConcurrentTransfers: 2)
        let old = machine.manualRoundStarted()
        let read = try unwrap(machine.readQueued().read)
        _ = machine.stopRequested()
        let outcome = machine.recordsRead(read, records: [queued("a")], earliestRetry: nil, now: 0)
        #expect(outcome.start.isEmpty, "stopSync came while the read was in flight")
        let new = machine.manualRoundStarted()
        machine.manualRoundEnded(old)
        #expect(machine.mayStartTransfers, "the newer syncNow still runs")
        machine.manualRoundEnded(new)
        #expect(!machine.mayStartTransfers)
    }

    @Test("close waits for operations in progress; idle waiters are released by stop and close")
    func operationsAndWaiters() throws {
        var machine = try syncing(running: ["a"])
        machine.operationStarted()
        machine.operationStarted()
        #expect(machine.parkUntilNoOperations(1) == nil)
        #expect(machine.operationEnded().resume.isEmpty)
        #expect(machine.operationEnded().resume == [1])
        #expect(machine.parkUntilNoOperations(2) == 2, "none in progress: go on at once")
        #expect(machine.parkUntilIdle(3) == nil)
        _ = machine.stopRequested()
        #expect(machine.stopFinished().resume == [3], "stopSync makes syncNow return early")
        let closing = machine.closeRequested()
        #expect(closing)
        #expect(machine.parkUntilIdle(4) == 4, "a closed queue never parks")
    }

    @Test("a failed read releases idle waiters and starts nothing")
    func failedRead() throws {
        var machine = Machine(maxConcurrentTransfers: 1)
        let generation = machine.manualRoundStarted()
        let read = try unwrap(machine.readQueued().read)
        #expect(machine.parkUntilIdle(5) == nil)
        #expect(machine.readFailed(read).resume == [5])
        #expect(machine.isIdle)
        machine.manualRoundEnded(generation)
    }

    @Test("the reconcile baseline: kept after a reconcile, dropped by a failure or an overlapping clearQueue")
    func reconcileBaseline() throws {
        var machine = Machine(maxConcurrentTransfers: 1)
        var start = machine.reconcileStarted()
        #expect(start.previous == nil)
        machine.reconciled(start, current: ["a", "b"])
        machine.noteChanged("x")
        start = machine.reconcileStarted()
        #expect(start.previous == ["a", "b"])
        #expect(machine.takeChangedSinceReconcile() == ["x"])
        machine.noteChanged("y")  // committed while this reconcile runs: stays for the next
        machine.tableCleared()
        machine.reconciled(start, current: ["a"])
        start = machine.reconcileStarted()
        #expect(start.previous == nil, "the table was cleared meanwhile: read everything")
        #expect(machine.takeChangedSinceReconcile() == ["y"])
        // A reconcile that failed (never reported) leaves no baseline either.
        #expect(machine.reconcileStarted().previous == nil)
        machine.retried(["r"])
        #expect(machine.changedSinceReconcile == ["r"])
    }

    /// Random event sequences: the bound holds, one transfer per id, reserved ids never start, and once
    /// every transfer and read has ended, parked waiters are all released.
    @Test("invariants over random event sequences", arguments: 0..<200)
    func randomHistories(seed: Int) throws {
        var random = SplitMix64(seed: UInt64(seed))
        let bound = Int(random.next() % 4) + 1
        var machine = Machine(maxConcurrentTransfers: bound)
        var pendingReads: [Machine.Read] = []
        var nextHandle = 1
        var parked: Set<Int> = []
        var released: Set<Int> = []
        let ids = (0..<6).map { "r\($0)" }
        for step in 0..<300 {
            switch random.next() % 9 {
            case 0: machine.syncStarted()
            case 1:
                _ = machine.stopRequested()
                released.formUnion(machine.stopFinished().resume)
            case 2: if let read = machine.readQueued().read { pendingReads.append(read) }
            case 3 where !pendingReads.isEmpty:
                let read = pendingReads.remove(at: Int(random.next() % UInt64(pendingReads.count)))
                let records = ids.shuffled(using: &random).prefix(4).map { queued($0) }
                let outcome = machine.recordsRead(read, records: records, earliestRetry: nil, now: 0)
                for record in outcome.start {
                    #expect(!machine.reservedIDs.contains(record.id), "a reserved id never starts")
                    machine.started(record.id, handle: nextHandle)
                    nextHandle += 1
                }
                if let again = outcome.read { pendingReads.append(again) }
                released.formUnion(outcome.resume)
            case 4 where !(machine.transferCount == 0):
                let id = machine.transferIDs.sorted()[Int(random.next() % UInt64(machine.transferCount))]
                let finishes: [Machine.Finish] = [.done, .cancelled, .willRetry]
                let outcome = machine.transferFinished(
                    id, state: .queuedUpload, finishes[Int(random.next() % 3)])
                if let read = outcome.read { pendingReads.append(read) }
                released.formUnion(outcome.resume)
            case 5:
                let id = ids[Int(random.next() % UInt64(ids.count))]
                if !machine.isTransferring(id), !machine.reserve(id) { machine.release(id) }
            case 6: machine.passStarted()
            case 7:
                if machine.parkUntilIdle(step) == nil { parked.insert(step) }
            default:
                if machine.mayStartOnRequest("v") {
                    machine.startedOnRequest("v", state: .synced, handle: nextHandle)
                    nextHandle += 1
                }
            }
            #expect(machine.transferCount <= bound + 1, "the bound (plus one download on request) holds")
            #expect(machine.readsInFlight == pendingReads.count)
        }
        // Wind down: finish everything, answer every read with nothing.
        for _ in 0..<100 where !machine.isIdle {
            if let read = pendingReads.popLast() {
                let outcome = machine.recordsRead(read, records: [], earliestRetry: nil, now: 0)
                released.formUnion(outcome.resume)
            } else if let id = machine.transferIDs.first {
                let outcome = machine.transferFinished(id, state: .queuedUpload, .done)
                if let read = outcome.read { pendingReads.append(read) }
                released.formUnion(outcome.resume)
            }
        }
        #expect(machine.isIdle)
        #expect(parked.isSubset(of: released), "every parked waiter is released once the queue is idle")
    }

    // Found by the model-based histories (seed 69): a give-up whose write failed counted as done, so the
    // transfer started again at once and failed again, without end.
    @Test("a give-up the store could not book waits for the next trigger instead of starting again at once")
    func unbookedGiveUpWaitsForTheNextTrigger() throws {
        var machine = try syncing(bound: 2, running: ["a"])
        let error = AttachmentError(code: .fileSystem, message: "the disk refused the write")
        let outcome = AttachmentQueue.TransferOutcome.failed(
            error, .giveUp(attempts: 1, releasingLocalFile: false, afterMaxAttempts: false), booked: false)
        let next = machine.transferFinished("a", state: .queuedUpload, outcome: outcome)
        #expect(machine.waitingForTrigger("a") == .queuedUpload)
        let again = machine.recordsRead(try unwrap(next.read), records: [queued("a")], earliestRetry: nil, now: 0)
        #expect(again.start.isEmpty, "not started again before the next trigger")
        machine.passStarted()
        let read = try unwrap(machine.readQueued().read)
        #expect(machine.recordsRead(read, records: [queued("a")], earliestRetry: nil, now: 0).start.map(\.id) == ["a"])
    }
}
