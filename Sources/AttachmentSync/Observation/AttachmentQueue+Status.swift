import Foundation

extension AttachmentQueue {
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
        let statusSQL = store.statusSQL
        let progress = progressCenter
        let budget = configuration.maxCacheBytes
        let bandwidthLimit = configuration.bandwidthLimit
        let task = Task {
            let latestRows = LockedValue<[AttachmentStore.StatusRow]?>(nil)
            let (changes, changed) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    do {
                        let rows = try db.watch(sql: statusSQL) { try AttachmentStore.statusRow($0) }
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
        var classes: [CachePolicy.Class: Int64] = [:]
        for row in rows {
            // Saturating: the sizes come from synced rows, and any device can write Int64.max.
            if let (cacheClass, bytes) = row.cacheClass {
                classes[cacheClass] = classes[cacheClass, default: 0].addingClamped(bytes)
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
            local = local.addingClamped(row.localBytes)
        }
        let (transfers, bytes) = progress?.snapshot() ?? ([], 0)
        return QueueStatus(
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
    }
}
