import Foundation
import Logging

extension AttachmentQueue {
    /// Carries out what the state machine decided, in order: the one place its actions take effect.
    ///
    /// A read of the queued records runs in a task of its own, awaited: the calling task may be a
    /// transfer's that `stopSync` cancelled before sync was started again, and a cancelled task's database
    /// reads fail at once.
    func run(_ actions: [Machine.Action]) async {
        for action in actions {
            if case .readQueued(let read) = action {
                await Task { await self.startQueuedTransfers(read) }.value
            } else {
                perform(action)
            }
        }
    }

    /// ``run(_:)`` for a caller that cannot wait (a `defer`): a read starts in a task of its own, not
    /// awaited (it counts as in flight from the moment the machine asked for it, so the queue does not look
    /// idle meanwhile).
    func perform(_ actions: [Machine.Action]) {
        for action in actions { perform(action) }
    }

    private func perform(_ action: Machine.Action) {
        switch action {
        case .startTransfers(let records):
            for record in records { startTransfer(record) }
        case .readQueued(let read):
            Task { await self.startQueuedTransfers(read) }
        case .cancel(let tasks):
            for task in tasks { task.cancel() }
        case .scheduleWake(let wake):
            scheduleRetryWake(wake)
        case .resume(let waiters):
            for waiter in waiters { waiter.resume() }
        }
    }

    /// A triggered pass: failed transfers become eligible again, the archive is trimmed, and queued
    /// attachments start transferring. Errors are logged; the next trigger tries again.
    func runPass() async {
        // Transfers and trimming are the lease holder's (another process of the app does them otherwise).
        guard await holdsCurrentLease() else {
            perform(machine.resumeIfIdle())
            return
        }
        machine.passStarted()
        await countDepthIfDue()
        await adoptHandOffs()
        do {
            try await trimArchive()
            try await enforceCacheBudget()
        } catch {
            logError("trimming the archived attachments failed", error)
        }
        await run(machine.readQueued())
        perform(machine.resumeIfIdle())
    }

    /// Counts the records by state for the queue-depth metric, when a metrics backend records and the last
    /// count is older than ``QueueTelemetry/depthInterval``. A failed count is skipped.
    func countDepthIfDue() async {
        guard telemetry.recordsMetrics else { return }
        let now = wallClock.milliseconds()
        if let last = depthCountedAt, now - last < QueueTelemetry.depthInterval.components.seconds * 1_000, now >= last
        {
            return
        }
        depthCountedAt = now
        let store = store
        guard let counts = try? await db.readTransaction({ tx in try store.countsByState(in: tx) }) else { return }
        for (state, gauge) in telemetry.depth { gauge.record(counts[state] ?? 0) }
    }

    /// Reads the queued records the machine asked for and hands them back to it, which picks the transfers
    /// to start (oldest first, up to the concurrency bound) and may ask for another read. Errors are logged.
    func startQueuedTransfers(_ read: Machine.Read) async {
        // Back from a suspension, the lease may have run out (and another process taken it).
        guard await holdsCurrentLease() else {
            perform(machine.readFailed(read))
            return
        }
        let store = store
        let now = wallClock.milliseconds()
        let raised = Array(machine.raisedIDs)
        // Records in flight cannot start again: their ids are enough.
        let busy = machine.busyIDs
        let rows: (queued: [AttachmentRecord], earliestRetry: Int64?)
        do {
            rows = try await db.readTransaction { tx in
                (
                    try store.queued(ids: raised, in: tx)
                        + store.queued(limit: read.limit, readyAt: now, skipping: busy, in: tx),
                    try store.earliestRetry(after: now, in: tx)
                )
            }
        } catch {
            logError("reading the queued attachments failed", error)
            perform(machine.readFailed(read))
            return
        }
        let policy = configuration.networkPolicy
        let directory = attachmentsDirectory
        await run(
            machine.recordsRead(
                read, records: rows.queued, earliestRetry: rows.earliestRetry, now: now,
                requirement: { policy.requirement($0.attachment(in: directory)) }))
    }

    /// Suspends until no transfer is in flight and no read is about to start more.
    func waitUntilIdle() async {
        await withCheckedContinuation { waiter in machine.parkUntilIdle(waiter)?.resume() }
    }
}
