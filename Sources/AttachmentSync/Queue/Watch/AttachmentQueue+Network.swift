extension AttachmentQueue {
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
