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

    // MARK: - The network and the device's unlocks

    /// Starts following ``Configuration/networkConditions``, and where the system tells of it the device's
    /// unlocks (``ProtectedData``), once (at startup), until ``close()``.
    func startFollowingNetwork() {
        if unlockFollower == nil, let unlocks = ProtectedData.unlocks() {
            // The device was unlocked: transfers that could not read their files try again at once.
            unlockFollower = Task { [weak self] in
                for await _ in unlocks {
                    guard let self else { return }
                    await self.restartLocalFileWaits()
                }
            }
        }
        guard networkFollower == nil, let source = configuration.networkConditions else { return }
        networkFollower = Task { [weak self] in
            for await conditions in source.updates() {
                guard let self else { return }
                await self.networkChanged(conditions)
            }
        }
    }

    /// Carries out a change of the network's conditions: interrupts the background transfers they no longer
    /// allow (they pause, keeping what they moved), and when they allow more than before, gives the
    /// transfers that failed for the network a fresh start and runs a pass.
    func networkChanged(_ conditions: NetworkConditions) async {
        guard !machine.isClosed else { return }
        let previous = networkNow.withLock { current -> NetworkConditions in
            defer { current = conditions }
            return current
        }
        let change = machine.networkChanged(conditions)
        progressCenter.noteNetwork(configuration.networkConditions == nil ? nil : conditions)
        if previous != conditions {
            logger.info("network conditions changed", metadata: ["from": "\(previous)", "to": "\(conditions)"])
        }
        perform(change.actions)
        if change.regained {
            let store = store
            do {
                let reset = try await db.writeTransaction { tx in try store.resetConnectivityFailures(in: tx) }
                if reset > 0 {
                    logger.debug(
                        "the network is back: retrying the transfers it failed", metadata: ["count": "\(reset)"])
                }
            } catch {
                logError("resetting the backoff of transfers that failed for the network failed", error)
            }
        }
        if change.improved {
            session?.triggers.yield()
        }
    }
}
