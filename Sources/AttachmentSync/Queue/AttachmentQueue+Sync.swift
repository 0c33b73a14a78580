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

    /// Triggers a pass whenever a record enters or leaves a queued state (the first emission is the startup
    /// trigger). The watch reads any value without failing; should it fail anyway (a closed database), it
    /// is made anew after a pause, like the app's watch.
    func followAttachmentsTable(triggers: AsyncStream<Void>.Continuation) async {
        var failures = 0
        while !Task.isCancelled {
            do {
                let signals = try db.watch(sql: store.queuedSignalSQL) { cursor in
                    [try cursor.getValue(name: "n"), try cursor.getValue(name: "latest")]
                }
                for try await _ in signals {
                    failures = 0
                    triggers.yield()
                }
                return
            } catch {
                if Task.isCancelled || error is CancellationError { return }
                failures += 1
                logError("the attachments table watch failed; it will be restarted", error)
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

    /// Follows the app's watched attachments: reconciles each emission. When the stream fails it is made
    /// anew after a pause (doubling from 1 second up to the sync interval, or 30 seconds).
    func followWatchedAttachments(
        _ makeStream: @Sendable () throws -> AsyncThrowingStream<[WatchedAttachmentItem], any Error>
    ) async {
        var failures = 0
        while !Task.isCancelled {
            do {
                // The first emission may come from a snapshot taken before changes made right after
                // subscribing (a save, and its upload): it must not archive records changed since then.
                var changedSince: Int64? = timestamps.next()
                let stream = try makeStream()
                for try await items in stream {
                    failures = 0
                    await reconcile(items, keepingRecordsChangedSince: changedSince)
                    changedSince = nil
                }
                if !Task.isCancelled {
                    logger.info("the watched attachments stream ended; attachments are no longer followed")
                }
                return
            } catch {
                if Task.isCancelled || error is CancellationError { return }
                failures += 1
                logError("the watched attachments stream failed; it will be restarted", error)
                do { try await configuration.clock.sleep(for: retryPause(afterFailures: failures)) } catch { return }
            }
        }
    }

    /// Brings the attachments table in line with one emission of the app's watched attachments, in one
    /// transaction; then cancels downloads of archived attachments and triggers a pass.
    ///
    /// The first emission (of a sync, or after a failure) is compared with the whole table. Each later one
    /// only with the records of ids that joined or left the watch since the previous emission, or whose
    /// records the queue changed meanwhile: every other id was reconciled before and neither its row nor
    /// its record has moved, so the decision for it cannot have changed. That keeps an emission of 100,000
    /// items with one change to a few milliseconds of work instead of a read of the whole table.
    ///
    /// - Parameter changedSince: When given, records changed at or after this timestamp are not archived.
    func reconcile(_ items: [WatchedAttachmentItem], keepingRecordsChangedSince changedSince: Int64? = nil) async {
        do {
            try await reconcileOrThrow(items, keepingRecordsChangedSince: changedSince)
        } catch {
            logError("reconciling the watched attachments failed", error)
        }
    }

    /// ``reconcile(_:keepingRecordsChangedSince:)``, throwing what fails instead of logging it.
    func reconcileOrThrow(_ items: [WatchedAttachmentItem], keepingRecordsChangedSince changedSince: Int64? = nil)
        async throws
    {
        // Until this emission is reconciled, a failure makes the next one read everything.
        let start = machine.reconcileStarted()
        let previous = start.previous
        do {
            try await waitForInit()
            let current = items.map(Reconciler.scopeKey(of:))
            // Noted changes committed from here on stay noted for the next emission.
            let changed = machine.takeChangedSinceReconcile()
            let scope = Reconciler.Scope(previous: previous, current: current, changed: changed).byId
            guard !scope.isEmpty else {
                machine.reconciled(start, current: current)
                return
            }
            let store = store
            let reconciler = reconciler
            let timestamps = timestamps
            let scopedItems = scope.items(of: items)
            @Sendable func decide(_ tx: SqlTransaction) throws -> Reconciler.Decision {
                let records =
                    switch scope {
                    case .everything: try store.records(in: tx)
                    case .ids(let ids): try store.records(ids: ids, in: tx)
                    }
                var decision = reconciler.reconcile(
                    items: scopedItems,
                    records: Dictionary(records.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first }),
                    // Asked only of given-up records (few): a linear look at the previous emission is fine.
                    previouslyWatched: previous.map { previous in
                        { id in previous.contains { Reconciler.id(fromScopeKey: $0) == id } }
                    }
                )
                if !decision.inserts.isEmpty {
                    decision.rejectSharedFilenames(
                        owners: try store.owners(ofFilenames: decision.inserts.map(\.filename), in: tx))
                }
                if let changedSince {
                    let recent = Set(records.filter { $0.timestamp >= changedSince }.map(\.id))
                    decision.archives.removeAll { recent.contains($0.id) }
                }
                return decision
            }
            // Most emissions change nothing: decide in a read transaction, which never waits for writers,
            // and take the write lock only when there is something to write (deciding again inside it, on
            // the data it will change).
            var decision = try await db.readTransaction(decide)
            let runningBefore = machine.transfers.compactMapValues(\.handle)
            if !decision.isEmpty {
                decision = try await db.writeTransaction { tx in
                    let decision = try decide(tx)
                    for var record in decision.inserts {
                        record.timestamp = timestamps.next()
                        try store.insert(record, in: tx)
                    }
                    for id in decision.restores {
                        try store.transition(id: id, from: .archived, to: .synced, timestamp: timestamps.next(), in: tx)
                    }
                    for id in decision.reuploads {
                        try store.transition(
                            id: id, from: .archived, to: .queuedUpload, timestamp: timestamps.next(),
                            set: AttachmentQueue.retryStateCleared + [("given_up", nil)], in: tx)
                    }
                    for record in decision.requeues {
                        try store.transition(
                            id: record.id, from: .archived, to: record.state, timestamp: timestamps.next(),
                            set: AttachmentQueue.retryStateCleared + [("given_up", nil)] + [
                                ("media_type", record.mediaType), ("meta_data", record.metaData),
                                ("on_demand", record.onDemand), ("content_hash", record.contentHash),
                                ("size", record.size),
                            ], in: tx)
                    }
                    for record in decision.learned {
                        try tx.execute(
                            sql: "UPDATE \(store.table) SET content_hash = coalesce(content_hash, ?), "
                                + "size = coalesce(size, ?) WHERE id = ? AND local_uri IS NULL AND state IN (0, 3)",
                            parameters: [record.contentHash, record.size, record.id])
                    }
                    for record in decision.refetches {
                        try store.transition(
                            id: record.id, from: .synced, to: record.state, timestamp: timestamps.next(),
                            set: AttachmentQueue.retryStateCleared + [
                                ("local_uri", nil), ("content_hash", record.contentHash), ("size", record.size),
                            ], in: tx)
                    }
                    for archive in decision.archives {
                        try store.transition(
                            id: archive.id, from: archive.from, to: .archived, timestamp: timestamps.next(), in: tx)
                    }
                    return decision
                }
            }
            // Content that disagrees with its row: its record let go of it; the file goes (a crash first
            // leaves a file its record does not claim, which startup removes).
            // Reserved meanwhile, so the download that replaces it cannot start (and be deleted) first.
            let refetching = decision.refetches.filter { machine.reserve($0.id) }
            for record in refetching {
                if let relative = record.localPath { try? await localStorage.deleteFile(filePath: localPath(relative)) }
                machine.release(record.id)
                logger.warning(
                    "downloaded content disagrees with the hash or size its row now carries; fetching it again",
                    metadata: ["attachment": "\(record.id)"])
            }
            for rejected in decision.rejected {
                logError("a watched attachment was skipped", rejected.error, id: rejected.item.id)
            }
            // Downloads of archived attachments are pointless now; cancel those that ran before the commit
            // (a transfer started since belongs to a newer decision).
            for archive in decision.archives where archive.from == .queuedDownload {
                if let task = machine.handle(of: archive.id), task == runningBefore[archive.id] { task.cancel() }
            }
            machine.reconciled(start, current: current)
            for archive in decision.archives { eventCenter.send(.archived(attachmentId: archive.id)) }
            if !decision.isEmpty {
                logger.debug(
                    "reconciled watched attachments",
                    metadata: [
                        "new": "\(decision.inserts.count)", "restored": "\(decision.restores.count)",
                        "reuploaded": "\(decision.reuploads.count)",
                        "requeued": "\(decision.requeues.count)", "archived": "\(decision.archives.count)",
                    ])
                trigger()
            }
        }
    }

    /// Brings the queue in line with `items`, the attachments the app's data refers to now, as if the
    /// watch had emitted them: new ids get a record (downloaded eagerly or on demand, as
    /// ``Configuration/downloadPolicy`` says), ids no longer present are archived, archived ones referred
    /// to again are restored or queued again. Then a pass is triggered.
    ///
    /// The queue calls it for each emission of `watchAttachments`; call it yourself when the app knows its
    /// attachments another way (a queue made without a watch, or a custom queue built on
    /// ``AttachmentQueueProtocol``). The next emission of the watch, if there is one, replaces what this
    /// call set.
    ///
    /// ```swift
    /// let ids = try await db.getAll(sql: "SELECT photo_id FROM checklists WHERE photo_id IS NOT NULL") {
    ///     try $0.getString(name: "photo_id")
    /// }
    /// try await queue.processWatchedAttachments(items: ids.map { try WatchedAttachmentItem(id: $0, fileExtension: "jpg") })
    /// ```
    ///
    /// - Parameter items: Every attachment that should be present.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/invalidName`` naming the
    ///   first item whose id or names cannot be an attachment's (an id in another Unicode form than NFC, a
    ///   name with `/`…); then nothing changes. A watched item that names a remote file another attachment
    ///   has is skipped and logged, as in the watch. Database errors; ``AttachmentError/Code-swift.struct/closed``
    ///   after ``close()``.
    public func processWatchedAttachments(items: [WatchedAttachmentItem]) async throws {
        try await operation {
            for item in items {
                try FileName.validateNormalization(item.id)
                _ = try Reconciler.newRecord(for: item, mode: .eager)
            }
            try await reconcileOrThrow(items)
        }
    }

    /// A triggered pass: failed transfers become eligible again, the archive is trimmed, and queued
    /// attachments start transferring. Errors are logged; the next trigger tries again.
    func runPass() async {
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
            let store = store
            let now = Self.milliseconds(configuration.currentDate())
            let rows: (queued: [AttachmentRecord], earliestRetry: Int64?)
            do {
                rows = try await db.readTransaction { tx in
                    (
                        try store.queued(limit: read.limit, readyAt: now, in: tx),
                        try store.earliestRetry(after: now, in: tx)
                    )
                }
            } catch {
                logError("reading the queued attachments failed", error)
                for waiter in machine.readFailed(read) { waiter.resume() }
                return
            }
            let outcome = machine.queuedRead(read, records: rows.queued, earliestRetry: rows.earliestRetry, now: now)
            if let wake = outcome.wake { scheduleRetryWake(wake) }
            for record in outcome.start { startTransfer(record) }
            for waiter in outcome.resume { waiter.resume() }
            next = outcome.readAgain
        }
    }

    /// Deletes the local files and records of archived attachments beyond
    /// ``Configuration/archivedCacheLimit``, oldest first, one trim at a time. Remote copies are never
    /// touched.
    func trimArchive() async throws {
        while let running = archiveTrim { _ = await running.result }
        // The task clears its own slot as it ends, before anyone waiting for it resumes; clearing it from
        // here instead would leave waiters spinning on a finished task until this caller got the actor.
        let task = Task {
            defer { self.archiveTrim = nil }
            try await self.evictArchivedBeyondLimit()
        }
        archiveTrim = task
        try await task.value
    }

    private func evictArchivedBeyondLimit() async throws {
        let store = store
        let limit = configuration.archivedCacheLimit
        let evictable = try await db.readTransaction { tx in try store.archivedBeyond(keep: limit, in: tx) }
        guard !evictable.isEmpty else { return }
        var evicted = 0
        for record in evictable where machine.transfers[record.id] == nil {
            guard try await evictArchived(record) else { continue }
            evicted += 1
        }
        logger.debug("evicted archived attachments", metadata: ["count": "\(evicted)"])
    }

    /// Evicts one archived attachment, record and file, unless it changed meanwhile (restored, say), in
    /// three steps each conditional on the one before: the record lets go of its file, the file goes, the
    /// record goes. A crash in between leaves a record without a file (harmless; evicted next time) or a
    /// file its record no longer claims (startup removes it); never a file nobody can attribute.
    func evictArchived(_ record: AttachmentRecord) async throws -> Bool {
        let store = store
        if let relative = record.localPath {
            let released = try await db.writeTransaction { tx in
                try tx.execute(
                    sql: "UPDATE \(store.table) SET local_uri = NULL WHERE id = ? AND local_uri = ? AND "
                        + AttachmentStore.evictableArchived,
                    parameters: [record.id, relative]) == 1
            }
            guard released else { return false }
            machine.noteChanged(record.id)
            try await localStorage.deleteFile(filePath: localPath(relative))
        }
        let deleted = try await db.writeTransaction { tx in
            try tx.execute(
                sql: "DELETE FROM \(store.table) WHERE id = ? AND local_uri IS NULL AND "
                    + AttachmentStore.evictableArchived,
                parameters: [record.id]) == 1
        }
        if deleted { machine.noteChanged(record.id) }
        if record.localPath != nil {
            eventCenter.send(.evicted(attachmentId: record.id, bytes: record.size ?? 0))
            return true
        }
        return deleted
    }

    /// Keeps local content within ``Configuration/maxCacheBytes``: evicts the least recently used archived
    /// content first (record and file), then purges the least recently used on-demand content back to
    /// remote-only. Content waiting for upload, eagerly downloaded content, pinned content and content
    /// being transferred are never touched.
    func enforceCacheBudget() async throws {
        guard let budget = configuration.maxCacheBytes else { return }
        let policy = CachePolicy(budget: budget)
        let store = store
        let (used, candidates) = try await db.readTransaction { tx -> (Int64, [AttachmentRecord]) in
            let used =
                try tx.get(
                    sql: "SELECT CAST(total(size) AS INTEGER) AS bytes FROM \(store.table) WHERE local_uri IS NOT NULL"
                ) { try $0.getInt64Optional(name: "bytes") } ?? 0
            guard used > budget else { return (used, []) }
            return (used, try store.records(in: tx, where: CachePolicy.evictableSQL))
        }
        guard used > budget else { return }
        let ordered = policy.evictionOrder(used: used, candidates: candidates, busy: Set(machine.transfers.keys))
        var remaining = used
        for record in ordered where remaining > budget && machine.transfers[record.id] == nil {
            guard let relative = record.localPath else { continue }
            if record.state == .archived {
                guard try await evictArchived(record) else { continue }
            } else {
                guard try await removeContent(of: record, relative: relative) else { continue }
                eventCenter.send(.evicted(attachmentId: record.id, bytes: record.size ?? 0))
            }
            remaining -= record.size ?? 0
        }
        if remaining > budget {
            // Every pass would say it again: `status` shows it (``QueueStatus/Cache``).
            logger.debug(
                "the cache stays over its budget: what is left is pinned, not uploaded yet, or downloaded eagerly",
                metadata: ["bytes": "\(remaining)", "budget": "\(budget)"])
        } else {
            logger.debug(
                "kept the cache within its budget", metadata: ["bytes": "\(remaining)", "budget": "\(budget)"])
        }
    }

    /// Milliseconds since 1970.
    static func milliseconds(_ date: Date) -> Int64 {
        clampedMilliseconds(date)
    }

    /// Makes the timer the machine asked for: a pass when the soonest retry time comes.
    private func scheduleRetryWake(_ wake: Machine.Wake) {
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

    /// Suspends until no transfer is in flight and no read is about to start more.
    func waitUntilIdle() async {
        await withCheckedContinuation { waiter in machine.parkUntilIdle(waiter)?.resume() }
    }
}
