import Foundation

/// Commits verified downloads in groups: the downloads that finish while one group is being committed
/// form the next, so many small downloads share one flush of their files, one flush of the folder and one
/// transaction, while a download that finishes alone is committed at once (no waiting for company).
///
/// Each file is flushed before its name is put in place and the names are flushed before the records
/// commit, the same order as one download on its own; a crash in between leaves files under their final
/// names whose records are still queued downloads, which the next attempt downloads again (as after a
/// crash between the move and the commit of a single download).
final class DownloadCommitter: Sendable {
    /// A verified download waiting to be put in place and committed.
    struct Entry: Sendable {
        var record: AttachmentRecord
        var size: Int64
        var sha256: String
        var stagingPath: String
        var finalPath: String
        var localName: String
        /// Whether the file is still to be flushed (a plain file the adapter wrote; content saved through the
        /// local storage adapter is flushed by it).
        var needsFlush: Bool
        /// For a download a background service made: the hand-off record its commit removes (whatever it
        /// decides for the attachment; when the record is gone already, another adoption came first and
        /// nothing is committed).
        var handOff: (store: HandOffStore, id: String)? = nil
    }

    private struct Waiting: Sendable {
        var entry: Entry
        var continuation: CheckedContinuation<TransferReport, any Error>
    }

    private struct State: Sendable {
        var pending: [Waiting] = []
        var draining = false
    }

    private let state = LockedValue(State())

    /// How many downloads wait for the group being committed to finish (for tests).
    var waiting: Int { state.withLock { $0.pending.count } }

    /// Puts the download in place and commits it with whatever else is waiting; returns its outcome. Runs to
    /// its end whatever happens to the calling task: the group is committed in a task of its own.
    func commit(_ entry: Entry, with worker: TransferWorker) async throws -> TransferReport {
        try await withCheckedThrowingContinuation { continuation in
            let starts = state.withLock { state -> Bool in
                state.pending.append(Waiting(entry: entry, continuation: continuation))
                guard !state.draining else { return false }
                state.draining = true
                return true
            }
            if starts { Task { await self.drain(with: worker) } }
        }
    }

    private func drain(with worker: TransferWorker) async {
        while true {
            let group = state.withLock { state -> [Waiting] in
                let group = state.pending
                state.pending = []
                if group.isEmpty { state.draining = false }
                return group
            }
            if group.isEmpty { return }
            let results = await worker.commitDownloads(group.map(\.entry))
            for (waiting, result) in zip(group, results) { waiting.continuation.resume(with: result) }
        }
    }
}

extension TransferWorker {
    /// Puts verified downloads in place and commits them: their files flushed together, renamed, their
    /// folders flushed, one transaction; then, per download, what happens when its record no longer wants it
    /// (archived, deleted, or now known to have other content): the file is removed again. One result per
    /// entry, in order.
    func commitDownloads(
        _ entries: [DownloadCommitter.Entry]
    ) async -> [Result<TransferReport, any Error>] {
        var results = [Result<TransferReport, any Error>?](repeating: nil, count: entries.count)
        func failAll(_ indexes: [Int], _ error: any Error) {
            for index in indexes { results[index] = .failure(error) }
        }
        // Plain files go through the file layer (one flush of the volume and one of the folder for the whole
        // group); another local storage adapter moves each file itself, durably.
        let plain = local is FileManagerStorageAdapter
        do {
            let staged = entries.filter(\.needsFlush).map(\.stagingPath)
            try await onBlockingThread { [files] in try files.synchronizeFiles(atPaths: staged) }
        } catch {
            return entries.map { _ in .failure(error) }
        }
        var placed: [Int] = []
        for (index, entry) in entries.enumerated() {
            do {
                if plain {
                    try files.rename(entry.stagingPath, to: entry.finalPath)
                } else {
                    try await local.moveFile(sourcePath: entry.stagingPath, targetPath: entry.finalPath)
                }
                placed.append(index)
            } catch {
                results[index] = .failure(error)
            }
        }
        if plain, !placed.isEmpty {
            do {
                for folder in Set(placed.map { (entries[$0].finalPath as NSString).deletingLastPathComponent }) {
                    try await onBlockingThread { [files] in try files.synchronizeDirectory(atPath: folder) }
                }
            } catch {
                failAll(placed, error)
                placed = []
            }
        }
        if !placed.isEmpty {
            await commitPlaced(entries, placed, into: &results)
        }
        return results.map { $0 ?? .failure(CancellationError()) }
    }

    /// The transaction of a group of downloads in place, and the clean-up of those it could not commit.
    private func commitPlaced(
        _ entries: [DownloadCommitter.Entry], _ placed: [Int],
        into results: inout [Result<TransferReport, any Error>?]
    ) async {
        let store = store
        let now = wallClock.milliseconds()
        let stamped = placed.map { (index: $0, timestamp: timestamps.next()) }
        let decisions: [(committed: Bool, current: AttachmentRecord?)]
        do {
            decisions = try await db.writeTransaction { tx in
                try stamped.map { item in
                    let entry = entries[item.index]
                    return try Self.commitDecision(entry, timestamp: item.timestamp, now: now, store: store, in: tx)
                }
            }
        } catch {
            for index in placed { results[index] = .failure(error) }
            return
        }
        var superseded: [Int] = []
        for (item, decision) in zip(stamped, decisions) {
            let entry = entries[item.index]
            if decision.committed {
                logger.debug("downloaded", metadata: ["attachment": "\(entry.record.id)", "bytes": "\(entry.size)"])
                results[item.index] = .success(.completed(bytes: entry.size))
            } else if let current = decision.current, current.localPath == nil,
                current.contentHash.map({ $0.lowercased() != entry.sha256 }) ?? false
                    || current.size.map({ $0 != entry.size }) ?? false
            {
                try? await local.deleteFile(filePath: entry.finalPath)
                results[item.index] = .failure(
                    AttachmentError(
                        code: .integrityMismatch,
                        message: "downloaded content of attachment \(String(reflecting: entry.record.id)) does not "
                            + "match the hash or size it is now known to have; the file was discarded",
                        attachmentId: entry.record.id, path: entry.finalPath))
            } else {
                superseded.append(item.index)
            }
        }
        guard !superseded.isEmpty else { return }
        // Archived or deleted meanwhile: unless the record took the file after all, remove it.
        let ids = superseded.map { entries[$0].record.id }
        let current: [String: String?]
        do {
            current = try await db.readTransaction { tx in
                var paths: [String: String?] = [:]
                for id in ids { paths[id] = try store.record(id: id, in: tx)?.localPath }
                return paths
            }
        } catch {
            for index in superseded { results[index] = .failure(error) }
            return
        }
        for index in superseded {
            let entry = entries[index]
            if current[entry.record.id] ?? nil != entry.localName {
                try? await local.deleteFile(filePath: entry.finalPath)
            }
            results[index] = .success(.superseded)
        }
    }

    /// Commits one download in a group's transaction, when its record still wants it: a queued download
    /// commits only while still queued (archived or deleted meanwhile: superseded); one asked for on a
    /// record without content also lands on a synced or archived record that is still without content,
    /// which keeps its state. The record may have learned a hash or size while the bytes came (a row
    /// carrying them): they must match it too.
    private static func commitDecision(
        _ entry: DownloadCommitter.Entry, timestamp: Int64, now: Int64, store: AttachmentStore, in tx: SqlTransaction
    ) throws -> (committed: Bool, current: AttachmentRecord?) {
        let record = entry.record
        if let handOff = entry.handOff, try !handOff.store.remove(id: handOff.id, in: tx) {
            return (false, try store.record(id: record.id, in: tx))
        }
        let contentColumns: RecordChange =
            .hasSynced(true) + .content(size: entry.size, sha256: entry.sha256) + .localFile(entry.localName)
            + .set(.lastUsedAt, now)
        let accepted: Set<AttachmentState> =
            record.state == .queuedDownload ? [.queuedDownload] : [.queuedDownload, .synced, .archived]
        guard let current = try store.record(id: record.id, in: tx), accepted.contains(current.state),
            current.state == .queuedDownload || current.localPath == nil,
            current.contentHash.map({ $0.lowercased() == entry.sha256 }) ?? true,
            current.size.map({ $0 == entry.size }) ?? true
        else { return (false, try store.record(id: record.id, in: tx)) }
        if current.state == .queuedDownload {
            return (
                try store.transition(
                    id: record.id, from: .queuedDownload, to: .synced, timestamp: timestamp,
                    set: contentColumns + .retryStateCleared, in: tx), current
            )
        }
        return (try store.update(id: record.id, ifState: current.state, set: contentColumns, in: tx), current)
    }
}
