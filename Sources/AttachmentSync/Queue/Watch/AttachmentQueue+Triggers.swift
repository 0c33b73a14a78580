import Foundation
import Logging

extension AttachmentQueue {
    /// Wakes the background loop for a pass (coalesced with other pending wake-ups).
    func trigger() {
        session?.triggers.yield()
    }

    /// One pass per trigger, then a pause of ``Configuration/syncThrottleDuration`` during which further
    /// triggers are coalesced into the next pass.
    func runTriggerLoop(_ triggers: AsyncStream<Void>) async {
        for await _ in triggers {
            await runPass()
            guard configuration.syncThrottleDuration > .zero else { continue }
            do {
                try await configuration.clock.sleep(for: configuration.syncThrottleDuration)
            } catch {
                return
            }
        }
    }

    /// Triggers a pass whenever a record enters a queued state (the first emission is the startup trigger;
    /// see ``AttachmentStore/queuedSignalSQL``). The watch reads any value without failing; should it fail anyway (a closed database), it
    /// is made anew after a pause, like the app's watch.
    func followAttachmentsTable(triggers: AsyncStream<Void>.Continuation) async {
        await restartingAfterFailures("the attachments table watch") { failures in
            let signals = try db.watch(
                options: WatchOptions(sql: store.queuedSignalSQL, parameters: []) { cursor in
                    try StateSet.queued.map { try cursor.getValue(name: "latest\($0.rawValue)") }
                }, caching: true)
            for try await _ in signals {
                failures = 0
                triggers.yield()
            }
        }
    }

    /// Runs `follow` (a watch) until it returns or the task is cancelled; when it throws, runs it again
    /// after ``retryPause(afterFailures:)``. `follow` sets the count of failures in a row back to 0 when
    /// its watch delivers.
    func restartingAfterFailures(
        _ watch: String, _ follow: (_ failures: inout Int) async throws -> Void
    ) async {
        var failures = 0
        while !Task.isCancelled {
            do {
                try await follow(&failures)
                return
            } catch {
                if Task.isCancelled || error is CancellationError { return }
                failures += 1
                logError("\(watch) failed; it will be restarted", error)
                do { try await configuration.clock.sleep(for: retryPause(afterFailures: failures)) } catch { return }
            }
        }
    }

    /// The pause before remaking a failed watch: 1 second, doubling up to the sync interval (or 30 seconds).
    func retryPause(afterFailures failures: Int) -> Duration {
        let longest = configuration.syncInterval > .zero ? configuration.syncInterval : .seconds(30)
        return min(Duration.seconds(1 << min(max(failures, 1) - 1, 16)), longest)
    }

    /// Triggers a pass every ``Configuration/syncInterval`` (only started when the interval is positive).
    func runPeriodicTimer() async {
        while !Task.isCancelled {
            do {
                try await configuration.clock.sleep(for: configuration.syncInterval)
            } catch {
                return
            }
            trigger()
        }
    }

    /// Makes the timer the machine asked for: a pass when the soonest retry time comes.
    func scheduleRetryWake(_ wake: Machine.Wake) {
        wake.replacing?.cancel()
        let clock = configuration.clock
        let task = Task {
            do {
                try await clock.sleep(for: wake.delay)
            } catch {
                return
            }
            self.machine.wakeFired(at: wake.time)
            self.trigger()
        }
        machine.wakeScheduled(at: wake.time, handle: task)
    }
}
