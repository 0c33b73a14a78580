import Foundation
import Logging

extension AttachmentQueue {
    /// Follows the app's watched attachments: reconciles each emission. When the stream fails it is made
    /// anew after a pause (doubling from 1 second up to the sync interval, or 30 seconds).
    func followWatchedAttachments(
        _ makeStream: @Sendable () throws -> AsyncThrowingStream<[WatchedAttachmentItem], any Error>
    ) async {
        await restartingAfterFailures("the watched attachments stream") { failures in
            // The first emission may come from a snapshot taken before changes made right after
            // subscribing (a save, and its upload): it must not archive records changed since then.
            var changedSince: Int64? = timestamps.next()
            let stream = try makeStream()
            for try await items in stream {
                failures = 0
                // Changed rows may mean another device's upload has landed: the downloads that waited for
                // one are asked for again. Before the reconcile, so that a record it makes, whose first
                // download may fail before this line, keeps the wait that failure set.
                await bringForwardAwaitingUploads(minimumSpacing: .seconds(5))
                await reconcile(items, keepingRecordsChangedSince: changedSince)
                changedSince = nil
            }
            if !Task.isCancelled {
                logger.info("the watched attachments stream ended; attachments are no longer followed")
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
            let runningBefore = machine.transferHandles
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
                            set: .retryStateCleared + .set(.givenUp, nil), in: tx)
                    }
                    for record in decision.requeues {
                        try store.transition(
                            id: record.id, from: .archived, to: record.state, timestamp: timestamps.next(),
                            set: .retryStateCleared + .set(.givenUp, nil) + .set(.mediaType, record.mediaType)
                                + .set(.metaData, record.metaData) + .set(.onDemand, record.onDemand)
                                + .set(.contentHash, record.contentHash) + .set(.size, record.size), in: tx)
                    }
                    for record in decision.learned {
                        try store.learn(contentHash: record.contentHash, size: record.size, id: record.id, in: tx)
                    }
                    for record in decision.refetches {
                        try store.transition(
                            id: record.id, from: .synced, to: record.state, timestamp: timestamps.next(),
                            set: .retryStateCleared + .set(.localUri, nil) + .set(.contentHash, record.contentHash)
                                + .set(.size, record.size), in: tx)
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
}
