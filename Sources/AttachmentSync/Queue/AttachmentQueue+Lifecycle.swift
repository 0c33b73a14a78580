import Foundation
import Logging

/// Starting, syncing, stopping and closing the queue; the bracket of every call that changes records or
/// files.
extension AttachmentQueue {
    /// Waits for the queue's startup and rethrows its error.
    ///
    /// Startup runs once, on the first call of any method: it checks the configuration and the attachments
    /// table, creates the attachments directory and subdirectories, and verifies records against files:
    /// a synced attachment whose file is missing is queued for download again; a file waiting for upload
    /// that was lost is archived (or, when the save that made it was interrupted after its commit, put in
    /// place); leftover temporary files are removed. With a large table (see
    /// ``Configuration/startupFileCheck``), only the queued attachments are checked before this returns and
    /// the rest in the background; ``waitForStartupCheck()`` waits for all of it.
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/invalidConfiguration``
    ///   or ``AttachmentError/Code-swift.struct/invalidName`` for bad options, a missing attachments table
    ///   or missing columns; ``AttachmentError/Code-swift.struct/closed`` after ``close()``.
    public func waitForInit() async throws {
        try ensureOpen()
        let task: Task<Void, any Error>
        if let initialization {
            task = initialization
        } else {
            task = Task { try await self.initialize() }
            initialization = task
        }
        do {
            try await task.value
        } catch {
            // A failed startup (a folder that could not be created for a moment, say) is tried again by the
            // next call instead of failing every call for the life of the queue.
            if initialization == task { initialization = nil }
            throw error
        }
    }

    /// Waits until startup's check of files has finished, including the part that runs after
    /// ``waitForInit()`` when ``Configuration/startupFileCheck`` has it run in the background, and rethrows
    /// its error.
    ///
    /// When it returns, every synced attachment whose file was missing at startup is queued for download
    /// again, every archived one has let go of its missing file, and the leftovers of earlier runs are gone.
    /// Returns at once when the whole check ran before the queue was ready. A check that failed is not run
    /// again before the next startup.
    ///
    /// - Throws: The errors of ``waitForInit()``; what the background check met (database and file system
    ///   errors); `CancellationError` when ``close()`` stopped it.
    public func waitForStartupCheck() async throws {
        try await waitForInit()
        try await backgroundFileCheck?.value
    }

    /// Starts syncing in the background: follows `watchAttachments`, reacts to changes of the attachments
    /// table (throttled by ``Configuration/syncThrottleDuration``), runs a pass every
    /// ``Configuration/syncInterval``, and runs one right away. Calling it while syncing does nothing.
    public func startSync() async throws {
        try await waitForInit()
        guard session == nil else { return }
        // Before the first pass, which needs it (when another process holds it, a later pass takes it over).
        await takeLease()
        guard session == nil else { return }
        let (triggers, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        var tasks: [Task<Void, Never>] = [
            Task { await self.runTriggerLoop(triggers) },
            Task { await self.followAttachmentsTable(triggers: continuation) },
        ]
        if let watchAttachments {
            tasks.append(Task { await self.followWatchedAttachments(watchAttachments) })
        }
        if configuration.syncInterval > .zero {
            tasks.append(Task { await self.runPeriodicTimer() })
        }
        if let service = handOffContext?.options.service {
            tasks.append(Task { await self.followBackgroundResults(service) })
        }
        // The table watch's first emission is the startup trigger: one pass right away, reading the table
        // no earlier than the watch did, so no change slips between the two.
        session = SyncSession(tasks: tasks, triggers: continuation)
        machine.syncStarted()
        syncingBeforeSuspension = nil
        logger.debug("sync started")
    }

    /// Stops background syncing and interrupts transfers in flight; they are retried when syncing starts
    /// again. Returns promptly.
    ///
    /// Once it has returned, no transfer starts until ``startSync()`` or ``syncNow()`` is called again: a
    /// ``syncNow()`` in progress returns early (also when sync was not started). Downloads asked for with
    /// ``download(attachmentId:)`` go on.
    public func stopSync() async {
        perform(machine.stopRequested())
        let session = self.session
        self.session = nil
        if let session {
            session.triggers.finish()
            for task in session.tasks { task.cancel() }
            for task in session.tasks { await task.value }
        }
        // A pass that was reading the table when the tasks were cancelled may have started one more.
        perform(machine.stopFinished())
        if session != nil { logger.debug("sync stopped") }
        await releaseLeaseIfUnwanted()
    }

    /// The same as ``stopSync()``, under the name of earlier PowerSync versions.
    public func stopSyncing() async {
        await stopSync()
    }

    /// Closes the queue: later calls throw ``AttachmentError/Code-swift.struct/closed``; calls already in
    /// progress that change records or files (``saveFile(data:mediaType:fileExtension:metaData:id:updateHook:)``,
    /// ``deleteFile(attachmentId:updateHook:)``, ``purge(attachmentId:)``…) finish first; then syncing stops
    /// and transfers in flight are interrupted and waited for. When it returns the queue no longer touches
    /// the database or the files, so the app may close the database. The database itself stays open (it is
    /// the app's). Closing twice is harmless.
    public func close() async {
        guard machine.closeRequested() else { return }
        // Calls already inside (a `saveFile` between its file and its commit, say) finish first.
        while machine.operationsInProgress > 0 {
            await withCheckedContinuation { waiter in machine.parkUntilNoOperations(waiter)?.resume() }
        }
        if let initialization { _ = await initialization.result }
        backgroundFileCheck?.cancel()
        if let backgroundFileCheck { _ = await backgroundFileCheck.result }
        networkFollower?.cancel()
        await networkFollower?.value
        unlockFollower?.cancel()
        await unlockFollower?.value
        await stopSync()
        adoption.recoveryCheck?.cancel()
        if let adopting = adoption.task { await adopting.value }
        let (running, actions) = machine.closeTransfers()
        perform(actions)
        for task in running { await task.value }
        if let archiveTrim { _ = await archiveTrim.result }
        await releaseLease()
        eventCenter.finish()
        logger.debug("queue closed")
    }

    /// Runs a sync pass now and returns when the queue is idle again: every queued attachment has been
    /// tried once (failures wait for the next trigger) and no transfer is in flight.
    ///
    /// Works whether or not background sync is on. ``stopSync()`` or ``close()`` makes it return early.
    public func syncNow() async throws {
        try await waitForInit()
        leaseUsers += 1
        if await takeLease() {
            let generation = machine.manualRoundStarted()
            await bringForwardAwaitingUploads()
            await runPass()
            await waitUntilIdle()
            machine.manualRoundEnded(generation)
        } else {
            logger.debug("syncNow: another process of the app holds the transfer lease and transfers")
        }
        leaseUsers -= 1
        await releaseLeaseIfUnwanted()
    }

    func ensureOpen() throws {
        if machine.isClosed {
            throw AttachmentError(code: .closed, message: "the attachment queue is closed")
        }
    }

    /// Runs a call that changes records or files, after startup, as one ``close()`` waits for.
    func operation<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        try await waitForInit()
        try ensureOpen()
        machine.operationStarted()
        defer { perform(machine.operationEnded()) }
        return try await body()
    }
}
