/// Sends each value to every current subscriber's stream: the one fan-out behind ``AttachmentQueue/events``
/// and the status stream's change signal.
///
/// Sending never waits: each stream buffers by its policy. A subscriber that stops iterating is removed.
final class Broadcaster<Element: Sendable>: Sendable {
    private struct State {
        var subscribers: [Int: AsyncStream<Element>.Continuation] = [:]
        var nextToken = 0
        var finished = false
    }

    private let state = LockedValue(State())
    private let bufferingPolicy: AsyncStream<Element>.Continuation.BufferingPolicy

    /// - Parameter bufferingPolicy: What each subscriber's stream keeps of values it has not taken yet.
    init(bufferingPolicy: AsyncStream<Element>.Continuation.BufferingPolicy) {
        self.bufferingPolicy = bufferingPolicy
    }

    /// A new subscriber's stream: values sent from now on. After ``finish()`` it ends at once.
    func subscribe() -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self, bufferingPolicy: bufferingPolicy)
        let token = state.withLock { state -> Int? in
            guard !state.finished else { return nil }
            state.nextToken += 1
            state.subscribers[state.nextToken] = continuation
            return state.nextToken
        }
        guard let token else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLock { state in _ = state.subscribers.removeValue(forKey: token) }
        }
        return stream
    }

    func send(_ value: Element) {
        let subscribers = state.withLock { Array($0.subscribers.values) }
        for subscriber in subscribers { subscriber.yield(value) }
    }

    /// Ends every subscriber's stream, and those of later subscribers.
    func finish() {
        let subscribers = state.withLock { state in
            defer {
                state.subscribers = [:]
                state.finished = true
            }
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers { subscriber.finish() }
    }
}
