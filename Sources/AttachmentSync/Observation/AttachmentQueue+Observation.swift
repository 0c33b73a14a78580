import Foundation
import Logging

extension AttachmentQueue {

    /// The progress of an attachment's current or next transfer, upload or download, eager or on request.
    ///
    /// Updates are throttled (at most one per ``Configuration/progressInterval``, or per 1 % of the file),
    /// never go backwards, and end with the transfer's final state; then the sequence ends. When the
    /// attachment has nothing left to transfer (its content is here, or there is no such attachment), the
    /// sequence gives one final update (or none) and ends.
    ///
    /// ```swift
    /// Task {
    ///     for await update in queue.progress(attachmentId: id) {
    ///         progressBar.value = update.fractionCompleted ?? 0
    ///     }
    /// }
    /// try await queue.download(attachmentId: id)
    /// ```
    public nonisolated func progress(attachmentId id: String) -> AsyncStream<AttachmentProgress> {
        let (stream, token) = progressCenter.subscribe(id)
        Task { await self.endProgressIfIdle(id, token: token) }
        return stream
    }

    private func endProgressIfIdle(_ id: String, token: Int) async {
        guard !machine.isTransferring(id) else { return }
        let record: AttachmentRecord?
        do {
            try await waitForInit()
            record = try await readRecord(id)
        } catch {
            progressCenter.endIfIdle(id, token: token, final: nil)
            return
        }
        guard let record else {
            progressCenter.endIfIdle(id, token: token, final: nil)
            return
        }
        guard record.localPath != nil, record.state == .synced || record.state == .archived else { return }
        let size = record.size ?? 0
        progressCenter.endIfIdle(
            id, token: token,
            final: AttachmentProgress(
                attachmentId: id, direction: record.hasSynced ? .download : .upload, completedBytes: size,
                totalBytes: size, status: .finished))
    }

    /// What happens to attachments from now on: uploads, downloads, deletes, archiving, evictions, purges,
    /// failures and give-ups. Each access makes a new subscriber; its sequence ends when the queue is
    /// closed. It holds the newest 10,000 events its reader has not taken yet.
    ///
    /// ```swift
    /// for await event in queue.events {
    ///     if case .gaveUp(let id, let error, _) = event { report(id, error) }
    /// }
    /// ```
    public nonisolated var events: AsyncStream<AttachmentEvent> {
        eventCenter.subscribe()
    }

    // MARK: - Status

    /// Snapshots of the queue, each time the attachments table changes or a transfer makes progress (at
    /// most as often as ``Configuration/progressInterval`` per transfer). The first comes at once. Each
    /// access makes a new subscriber; stop iterating to end it.
    ///
    /// ```swift
    /// for await status in queue.status {
    ///     badge.text = "\(status.count(.queuedUpload)) to upload"
    /// }
    /// ```
    public nonisolated var status: AsyncStream<QueueStatus> {
        let (stream, continuation) = AsyncStream.makeStream(
            of: QueueStatus.self, bufferingPolicy: .bufferingNewest(1))
        let db = db
        let store = store
        let progress = progressCenter
        let budget = configuration.maxCacheBytes
        let bandwidthLimit = configuration.bandwidthLimit
        let task = Task {
            let latestRows = LockedValue<[AttachmentStore.StatusRow]?>(nil)
            let (changes, changed) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    do {
                        // One scan of the table and the indexed lists, read again after each commit to it.
                        let rows = try db.watch(describedBy: "the attachments table's status") { tx in
                            try store.statusRows(in: tx)
                        }
                        for try await value in rows {
                            latestRows.withLock { $0 = value }
                            changed.yield()
                        }
                    } catch {}
                    changed.finish()
                }
                group.addTask {
                    for await _ in progress.listen() { changed.yield() }
                }
                for await _ in changes {
                    guard let rows = latestRows.withLock({ $0 }) else { continue }
                    var status = Self.snapshot(rows, progress: progress, budget: budget)
                    status.bandwidthLimit = bandwidthLimit
                    continuation.yield(status)
                }
                group.cancelAll()
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    static func snapshot(_ rows: [AttachmentStore.StatusRow], progress: ProgressCenter?, budget: Int64?) -> QueueStatus
    {
        var states: [AttachmentState: QueueStatus.Totals] = [:]
        var local: Int64 = 0
        var retries: [QueueStatus.Retry] = []
        var givenUp: [QueueStatus.GivenUp] = []
        var localOnly = QueueStatus.Totals(count: 0, bytes: 0)
        var handedOff: [AttachmentState: QueueStatus.Totals] = [:]
        var classes: [CachePolicy.Class: Int64] = [:]
        for row in rows {
            // Saturating: the sizes come from synced rows, and any device can write Int64.max.
            if let entry = row.cacheClass {
                classes[entry.cacheClass] = classes[entry.cacheClass, default: 0].addingClamped(entry.bytes)
            }
            if let totals = row.totals {
                // A state outside the known ones is read as archived: its totals join archived's.
                if let known = states[row.state] {
                    states[row.state] = QueueStatus.Totals(
                        count: known.count + totals.count, bytes: known.bytes.addingClamped(totals.bytes),
                        unknownSizeCount: known.unknownSizeCount + totals.unknownSizeCount,
                        invalidSizeCount: known.invalidSizeCount + totals.invalidSizeCount)
                } else {
                    states[row.state] = totals
                }
            }
            if let retry = row.retry { retries.append(retry) }
            if let entry = row.givenUp { givenUp.append(entry) }
            if let totals = row.localOnly { localOnly = totals }
            if let totals = row.handedOff { handedOff[row.state] = totals }
            local = local.addingClamped(row.localBytes)
        }
        let (transfers, bytes) = progress?.snapshot() ?? ([], 0)
        var status = QueueStatus(
            states: states, localContentBytes: local, transfers: transfers, bytesTransferred: bytes,
            throttledConcurrency: progress?.loweredConcurrency, network: progress?.networkConditions,
            isPausedForLocalFiles: progress?.isPausedForLocalFiles ?? false,
            waitingForRetry: retries.sorted {
                ($0.nextAttemptAt, $0.attachmentId) < ($1.nextAttemptAt, $1.attachmentId)
            },
            localOnly: localOnly,
            givenUp: givenUp.sorted { $0.attachmentId < $1.attachmentId },
            cache: QueueStatus.Cache(
                budget: budget, usedBytes: classes.values.reduce(0) { $0.addingClamped($1) },
                evictableBytes: classes[.evictable] ?? 0, pinnedBytes: classes[.pinned] ?? 0,
                notUploadedBytes: classes[.notUploaded] ?? 0, keptBytes: classes[.kept] ?? 0))
        status.handedOff = handedOff
        return status
    }

    // MARK: - Records

    /// The attachment with the given id, or `nil` when there is none.
    public func attachment(id: String) async throws -> Attachment? {
        try await waitForInit()
        let store = store
        let directory = attachmentsDirectory
        return try await db.readTransaction { tx in try store.record(id: id, in: tx)?.attachment(in: directory) }
    }

    /// The attachments in the given state, oldest change first.
    public func attachments(in state: AttachmentState) async throws -> [Attachment] {
        try await waitForInit()
        let store = store
        let directory = attachmentsDirectory
        return try await db.readTransaction { tx in
            try store.records(in: state, in: tx).map {
                $0.attachment(in: directory)
            }
        }
    }

    /// Every attachment, oldest change first.
    public func allAttachments() async throws -> [Attachment] {
        try await waitForInit()
        let store = store
        let directory = attachmentsDirectory
        return try await db.readTransaction { tx in try store.records(in: tx).map { $0.attachment(in: directory) } }
    }
}
