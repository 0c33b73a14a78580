import Foundation
import Logging

extension AttachmentQueue {
    /// A triggered pass: failed transfers become eligible again, the archive is trimmed, and queued
    /// attachments start transferring. Errors are logged; the next trigger tries again.
    func runPass() async {
        // Transfers and trimming are the lease holder's (another process of the app does them otherwise).
        guard await holdsCurrentLease() else {
            for waiter in machine.resumeIfIdle() { waiter.resume() }
            return
        }
        machine.passStarted()
        do {
            try await trimArchive()
            try await enforceCacheBudget()
        } catch {
            logError("trimming the archived attachments failed", error)
        }
        if let read = machine.readQueued() { await startQueuedTransfers(read) }
        for waiter in machine.resumeIfIdle() { waiter.resume() }
    }

    /// Reads the queued records the machine asked for and starts the transfers it picks from them, oldest
    /// first, up to the concurrency bound; reads again while it asks to. Errors are logged.
    func startQueuedTransfers(_ read: Machine.Read)
        async
    {
        var next: Machine.Read? = read
        while let read = next {
            next = nil
            // Back from a suspension, the lease may have run out (and another process taken it).
            guard await holdsCurrentLease() else {
                for waiter in machine.readFailed(read) { waiter.resume() }
                return
            }
            let store = store
            let now = wallClock.milliseconds()
            let raised = Array(machine.raised)
            let rows: (queued: [AttachmentRecord], earliestRetry: Int64?)
            do {
                rows = try await db.readTransaction { tx in
                    (
                        try store.queued(ids: raised, in: tx) + store.queued(limit: read.limit, readyAt: now, in: tx),
                        try store.earliestRetry(after: now, in: tx)
                    )
                }
            } catch {
                logError("reading the queued attachments failed", error)
                let waiters = machine.readFailed(read)
                for waiter in waiters { waiter.resume() }
                return
            }
            let policy = configuration.networkPolicy
            let directory = attachmentsDirectory
            let outcome = machine.queuedRead(
                read, records: rows.queued, earliestRetry: rows.earliestRetry, now: now,
                requirement: { policy.requirement($0.attachment(in: directory)) })
            if let wake = outcome.wake { scheduleRetryWake(wake) }
            for record in outcome.start { startTransfer(record) }
            for waiter in outcome.resume { waiter.resume() }
            next = outcome.readAgain
        }
    }

    /// Suspends until no transfer is in flight and no read is about to start more.
    func waitUntilIdle() async {
        await withCheckedContinuation { waiter in machine.parkUntilIdle(waiter)?.resume() }
    }

}
