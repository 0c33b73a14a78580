import Foundation

/// Commits finished uploads in groups, as ``DownloadCommitter`` does downloads: the uploads that finish while
/// one group is being committed form the next and share its transaction, while an upload that finishes alone
/// is committed at once (no waiting for company).
///
/// A record becomes `synced` only after the remote holds its file, as when each upload committed on its own; a
/// crash before the group's commit leaves queued uploads whose files the remote already has, which the next
/// attempt settles (create-only: the same content under the name is the upload done). When a group's
/// transaction fails, each of its uploads is committed again on its own, so that one upload's failure is
/// never another's.
final class UploadCommitter: Sendable {
    /// A finished upload waiting to be committed.
    struct Entry: Sendable {
        var id: String
        var size: Int64
    }

    private struct Waiting: Sendable {
        var entry: Entry
        var continuation: CheckedContinuation<Bool, any Error>
    }

    private struct State: Sendable {
        var pending: [Waiting] = []
        var draining = false
        /// How many uploads the transaction under way commits.
        var committing = 0
        /// The size of each transaction tried, in order, the last ``keptTransactions`` only (for tests).
        var transactions: [Int] = []
    }

    /// How many of the latest transactions' sizes ``transactions`` keeps: a queue that runs for months
    /// must not keep one per transaction.
    static let keptTransactions = 256

    private let state = LockedValue(State())
    private let db: LocalDatabase
    private let store: AttachmentStore
    private let timestamps: MonotonicTimestamps

    init(db: LocalDatabase, store: AttachmentStore, timestamps: MonotonicTimestamps) {
        self.db = db
        self.store = store
        self.timestamps = timestamps
    }

    /// How many uploads wait for the group being committed to finish (for tests).
    var waiting: Int { state.withLock { $0.pending.count } }
    /// How many uploads the transaction under way commits (for tests).
    var committing: Int { state.withLock { $0.committing } }
    /// How many uploads each of the latest transactions tried held, in order (for tests).
    var transactions: [Int] { state.withLock { $0.transactions } }

    /// Marks the upload's record `synced`, in one transaction with whatever else is waiting; returns whether
    /// it was (`false`: the record was no longer a queued upload). Runs to its end whatever happens to the
    /// calling task: the group is committed in a task of its own.
    func commit(_ entry: Entry) async throws -> Bool {
        try await withCheckedThrowingContinuation { continuation in
            let starts = state.withLock { state -> Bool in
                state.pending.append(Waiting(entry: entry, continuation: continuation))
                guard !state.draining else { return false }
                state.draining = true
                return true
            }
            if starts { Task { await self.drain() } }
        }
    }

    private func drain() async {
        while true {
            let group = state.withLock { state -> [Waiting] in
                let group = state.pending
                state.pending = []
                if group.isEmpty { state.draining = false }
                return group
            }
            if group.isEmpty { return }
            do {
                let committed = try await mark(group.map(\.entry))
                for (waiting, done) in zip(group, committed) { waiting.continuation.resume(returning: done) }
            } catch {
                guard group.count > 1 else {
                    group[0].continuation.resume(throwing: error)
                    continue
                }
                for waiting in group {
                    do {
                        waiting.continuation.resume(returning: try await mark([waiting.entry])[0])
                    } catch {
                        waiting.continuation.resume(throwing: error)
                    }
                }
            }
        }
    }

    /// One transaction marking `entries` uploaded; whether each record was changed, in order. Their
    /// timestamps are taken now, not when each upload finished, so that a record made `synced` after a wait
    /// for the group never carries a time older than changes committed while it waited.
    private func mark(_ entries: [Entry]) async throws -> [Bool] {
        let store = store
        state.withLock {
            $0.committing = entries.count
            $0.transactions.append(entries.count)
            if $0.transactions.count > Self.keptTransactions {
                $0.transactions.removeFirst($0.transactions.count - Self.keptTransactions)
            }
        }
        defer { state.withLock { $0.committing = 0 } }
        let stamped = entries.map { (entry: $0, timestamp: timestamps.next()) }
        return try await db.writeTransaction { tx in
            try stamped.map {
                try store.markUploaded(id: $0.entry.id, size: $0.entry.size, timestamp: $0.timestamp, in: tx)
            }
        }
    }
}
