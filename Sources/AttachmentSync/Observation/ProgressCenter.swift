import Foundation

/// Shares the progress of transfers with ``AttachmentQueue/progress(attachmentId:)`` subscribers and the
/// status stream, throttled per transfer. Transfers report from their own tasks, off the queue's actor, so
/// the state sits behind a lock rather than on the actor: reporting never waits for the queue.
final class ProgressCenter: Sendable {
    private struct Transfer {
        var progress: AttachmentProgress
        /// When the last update went out, and how far the transfer was then.
        var lastSentAt: Duration
        var lastSentFraction: Double?
    }

    private struct State {
        var subscribers: [String: [Int: AsyncStream<AttachmentProgress>.Continuation]] = [:]
        var transfers: [String: Transfer] = [:]
        var bytesTransferred: Int64 = 0
        var nextToken = 0
    }

    /// An update, and who gets it.
    private typealias Delivery = (
        update: AttachmentProgress, subscribers: [AsyncStream<AttachmentProgress>.Continuation]
    )

    private let state = LockedValue(State())
    /// How many transfers the queue runs at once when lowered for overload (see `AdaptiveConcurrency`).
    private let lowered = LockedValue<Int?>(nil)
    /// Signals each update, for the status stream.
    private let changes = Broadcaster<Void>(bufferingPolicy: .bufferingNewest(1))
    private let elapsed: @Sendable () -> Duration
    private let interval: Duration

    init(clock: any Clock<Duration>, interval: Duration) {
        self.elapsed = Stopwatch.start(clock)
        self.interval = interval
    }

    // MARK: Subscribing

    /// A stream of the updates of `id`'s current or next transfer; it ends after that transfer's final
    /// update (or when `end(subscriber:)` ends it). A transfer in flight is reported at once.
    func subscribe(_ id: String) -> (stream: AsyncStream<AttachmentProgress>, token: Int) {
        let (stream, continuation) = AsyncStream.makeStream(
            of: AttachmentProgress.self, bufferingPolicy: .bufferingNewest(256))
        let token = state.withLock { state in
            state.nextToken += 1
            state.subscribers[id, default: [:]][state.nextToken] = continuation
            if let transfer = state.transfers[id] { continuation.yield(transfer.progress) }
            return state.nextToken
        }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLock { state in _ = state.subscribers[id]?.removeValue(forKey: token) }
        }
        return (stream, token)
    }

    /// Ends subscriber `token` of `id` with `final`, unless a transfer of `id` is in flight (its own final
    /// update will end the stream). For a subscription to an attachment with nothing left to transfer.
    func endIfIdle(_ id: String, token: Int, final: AttachmentProgress?) {
        let continuation = state.withLock { state -> AsyncStream<AttachmentProgress>.Continuation? in
            guard state.transfers[id] == nil else { return nil }
            return state.subscribers[id]?.removeValue(forKey: token)
        }
        if let final { continuation?.yield(final) }
        continuation?.finish()
    }

    /// A signal each time an update goes out or a transfer begins or ends, for the status stream.
    func listen() -> AsyncStream<Void> {
        changes.subscribe()
    }

    /// The transfers in flight, and the bytes moved since the queue was made.
    /// The queue's concurrency limit after a transfer finished: `nil` at the configured maximum. A change
    /// makes the status stream send a snapshot.
    func noteConcurrency(_ limit: Int, maximum: Int) {
        let value: Int? = limit < maximum ? limit : nil
        let changed = lowered.withLock { current -> Bool in
            defer { current = value }
            return current != value
        }
        if changed { changes.send(()) }
    }

    /// The concurrency limit while lowered for overload, else `nil`.
    var loweredConcurrency: Int? { lowered.withLock { $0 } }

    /// The network's conditions, or `nil` without a source.
    private let network = LockedValue<NetworkConditions?>(nil)

    /// The network's conditions changed (`nil`: the queue has no source); the status stream sends a snapshot.
    func noteNetwork(_ conditions: NetworkConditions?) {
        let changed = network.withLock { current -> Bool in
            defer { current = conditions }
            return current != conditions
        }
        if changed { changes.send(()) }
    }

    /// The network's conditions as last reported, or `nil` without a source.
    var networkConditions: NetworkConditions? { network.withLock { $0 } }

    /// Whether the local files are out of reach (see ``QueueStatus/isPausedForLocalFiles``).
    private let localFilesOutOfReach = LockedValue(false)

    /// The local files went out of reach (`true`) or came back; the status stream sends a snapshot.
    func noteLocalFiles(outOfReach: Bool) {
        let changed = localFilesOutOfReach.withLock { current -> Bool in
            defer { current = outOfReach }
            return current != outOfReach
        }
        if changed { changes.send(()) }
    }

    /// Whether the local files were out of reach at the last transfer that tried them.
    var isPausedForLocalFiles: Bool { localFilesOutOfReach.withLock { $0 } }

    func snapshot() -> (transfers: [AttachmentProgress], bytesTransferred: Int64) {
        state.withLock { state in
            (
                state.transfers.values.map(\.progress).sorted { $0.attachmentId < $1.attachmentId },
                state.bytesTransferred
            )
        }
    }

    // MARK: Reporting

    /// A transfer of `id` starts, with `completedBytes` already in place (a resumed download's).
    func begin(
        _ id: String, direction: AttachmentProgress.Direction, completedBytes: Int64 = 0, totalBytes: Int64?
    ) {
        let now = elapsed()
        let update = AttachmentProgress(
            attachmentId: id, direction: direction, completedBytes: completedBytes, totalBytes: totalBytes,
            status: .transferring)
        let subscribers = state.withLock { state in
            state.transfers[id] = Transfer(
                progress: update, lastSentAt: now, lastSentFraction: update.fractionCompleted)
            return Array((state.subscribers[id] ?? [:]).values)
        }
        for subscriber in subscribers { subscriber.yield(update) }
        changes.send(())
    }

    /// The adapter's progress callback for `id`'s transfer: sent on when `interval` has passed since the
    /// last update, or the transfer advanced by 1 %, or it reached its total.
    func report(_ id: String, _ progress: TransferProgress) {
        let now = elapsed()
        let interval = interval
        let sent = state.withLock {
            state -> Delivery? in
            guard var transfer = state.transfers[id] else { return nil }
            let completed = max(transfer.progress.completedBytes, progress.completedBytes)
            state.bytesTransferred = state.bytesTransferred.addingClamped(
                completed.subtractingClamped(transfer.progress.completedBytes))
            transfer.progress.completedBytes = completed
            transfer.progress.totalBytes = progress.totalBytes ?? transfer.progress.totalBytes
            let fraction = transfer.progress.fractionCompleted
            let due =
                now - transfer.lastSentAt >= interval
                || (fraction ?? 0) - (transfer.lastSentFraction ?? 0) >= 0.01
                || (transfer.progress.totalBytes.map { completed >= $0 } ?? false)
            guard due, completed > 0 || transfer.lastSentFraction == nil else {
                state.transfers[id] = transfer
                return nil
            }
            transfer.lastSentAt = now
            transfer.lastSentFraction = fraction
            state.transfers[id] = transfer
            return (transfer.progress, Array((state.subscribers[id] ?? [:]).values))
        }
        guard let (update, subscribers) = sent else { return }
        for subscriber in subscribers { subscriber.yield(update) }
        changes.send(())
    }

    /// `id`'s transfer ended with `status`: its subscribers get the final update, and their streams end.
    func end(_ id: String, status: AttachmentProgress.Status) {
        let ended = state.withLock {
            state -> Delivery? in
            guard var transfer = state.transfers.removeValue(forKey: id) else { return nil }
            transfer.progress.status = status
            if case .finished = status, let total = transfer.progress.totalBytes {
                state.bytesTransferred = state.bytesTransferred.addingClamped(
                    max(0, total.subtractingClamped(transfer.progress.completedBytes)))
                transfer.progress.completedBytes = max(transfer.progress.completedBytes, total)
            }
            let subscribers = Array((state.subscribers.removeValue(forKey: id) ?? [:]).values)
            return (transfer.progress, subscribers)
        }
        guard let (update, subscribers) = ended else { return }
        for subscriber in subscribers {
            subscriber.yield(update)
            subscriber.finish()
        }
        changes.send(())
    }
}
