import AttachmentSync
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// One request of a ``URLSessionEngine``: its task, the wait for its response head, its body buffer, its
/// upload progress. The session's delegate forwards the task's callbacks here (on the delegate queue); the
/// Swift task that called `execute`, then the body's reader, wait here.
///
/// `@unchecked Sendable`: `task` and `streamFactory` are written once, in ``attach(task:streamFactory:)``,
/// before the object is registered with the delegate and before the task is resumed (so before any other
/// thread can reach it), and only read after; `URLSessionTask`'s `resume`, `suspend` and `cancel` may be
/// called from any thread (Apple's documentation; swift-corelibs-foundation runs each on the task's
/// serial work queue with `workQueue.sync`). Every other mutable property is inside a `LockedValue`.
final class URLSessionExchange: @unchecked Sendable {
    struct Head: Sendable {
        var status: HTTPStatus
        var headers: HTTPHeaderFields
    }

    private struct State {
        var headContinuation: CheckedContinuation<Head, any Error>?
        var headDelivered = false
        /// Why the request ended early, when this side ended it (the reader's task cancelled, the body
        /// dropped, the engine shut down, an encoded body refused): the error its waiters get.
        var endedBecause: (any Error)?
        var completed = false
        var finishActions: [@Sendable () -> Void] = []
        /// Upload bytes reported through `onChunk` in this attempt.
        var reportedSent: Int64 = 0
    }

    let method: HTTPRequestMethod
    let fileBody: HTTPFileBody?
    let buffer: URLSessionResponseBuffer
    private let state = LockedValue(State())
    private var task: URLSessionTask?
    private var streamFactory: (@Sendable () -> BodyStream?)?
    #if canImport(Darwin)
        let pacer: URLSessionUploadPacer?
    #else
        /// The body stream being read, whose throttle wait ``end(because:)`` interrupts.
        private let currentGate = LockedValue<ThrottleGate?>(nil)
    #endif

    init(method: HTTPRequestMethod, body: HTTPEngineRequestBody, buffer: URLSessionResponseBuffer) {
        self.method = method
        if case .file(let file) = body { fileBody = file } else { fileBody = nil }
        self.buffer = buffer
        #if canImport(Darwin)
            pacer = fileBody?.throttle.map { URLSessionUploadPacer(throttle: $0) }
        #endif
    }

    /// Sets the task (once, before it is shared; see the type's comment).
    func attach(task: URLSessionTask, streamFactory: (@Sendable () -> BodyStream?)?) {
        self.task = task
        self.streamFactory = streamFactory
    }

    /// Runs `action` once the task has completed (or now, when it has).
    func onFinish(_ action: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            guard !state.completed else { return true }
            state.finishActions.append(action)
            return false
        }
        if now { action() }
    }

    /// Starts the task and waits for its response head.
    func waitForHead() async throws -> Head {
        try await withCheckedThrowingContinuation { continuation in
            let early = state.withLock { state -> (any Error)? in
                if let reason = state.endedBecause { return reason }
                state.headContinuation = continuation
                return nil
            }
            if let early {
                continuation.resume(throwing: early)
                task?.cancel()
            } else {
                task?.resume()
            }
        }
    }

    /// Ends the request from this side: its waiters get `reason`, the task is cancelled. Does nothing once the
    /// task completed and its body was read.
    func end(because reason: any Error) {
        let continuation = state.withLock { state -> CheckedContinuation<Head, any Error>? in
            if state.endedBecause == nil, !state.completed { state.endedBecause = reason }
            defer { state.headContinuation = nil }
            return state.headContinuation
        }
        continuation?.resume(throwing: reason)
        buffer.fail(reason)
        #if canImport(Darwin)
            pacer?.stop()
        #else
            // Before `cancel()`: on Linux it waits for the session's work queue, which a throttle wait blocks.
            currentGate.withLock { $0 }?.cancel()
        #endif
        task?.cancel()
    }

    /// The Swift task waiting on this request was cancelled.
    func cancel() {
        end(because: CancellationError())
    }

    /// The response body was released: ends the request unless it was read to the end.
    func bodyDropped() {
        guard !buffer.isFinished else {
            buffer.fail(CancellationError())  // removes any spill file
            return
        }
        cancel()
    }

    // MARK: Delegate callbacks (on the session's delegate queue)

    func didReceive(response: URLResponse) {
        let http = response as? HTTPURLResponse
        var headers = HTTPHeaderFields()
        for (name, value) in (http?.allHeaderFields ?? [:]).sorted(by: { "\($0.key)" < "\($1.key)" }) {
            headers.add(name: "\(name)", value: "\(value)")
        }
        let head = Head(status: HTTPStatus(code: http?.statusCode ?? 0), headers: headers)
        let continuation = state.withLock { state -> CheckedContinuation<Head, any Error>? in
            state.headDelivered = true
            defer { state.headContinuation = nil }
            return state.headContinuation
        }
        continuation?.resume(returning: head)
        if method != .HEAD, let encoding = head.headers.first(name: "Content-Encoding"),
            encoding.trimmingCharacters(in: .whitespaces).lowercased() != "identity"
        {
            end(because: URLSessionEngineError.encodedBody(encoding))
        }
    }

    func didReceive(data: Data) {
        if let action = buffer.append(data) { apply(action) }
    }

    /// The body's next chunk, `nil` at its end.
    func nextChunk() async throws -> Data? {
        let (chunk, action) = try await buffer.next()
        if let action { apply(action) }
        return chunk
    }

    func didSend(bytes: Int64) {
        guard let fileBody, bytes > 0 else { return }
        let count = state.withLock { state -> Int64 in
            let count = min(bytes, fileBody.length - state.reportedSent)
            state.reportedSent += max(0, count)
            return count
        }
        if count > 0 { fileBody.onChunk(Int(count)) }
        #if canImport(Darwin)
            pacer?.sent(Int(bytes), task: task)
        #endif
    }

    func newBodyStream() -> InputStream? {
        state.withLock { $0.reportedSent = 0 }
        let body = streamFactory?()
        #if !canImport(Darwin)
            let gate = body?.gate
            currentGate.withLock { $0 = gate }
            if state.withLock({ $0.endedBecause != nil }) { gate?.cancel() }
        #endif
        return body?.stream
    }

    func didComplete(error: (any Error)?) {
        let (reason, continuation, actions) = state.withLock { state in
            state.completed = true
            defer {
                state.headContinuation = nil
                state.finishActions = []
            }
            return (state.endedBecause, state.headContinuation, state.finishActions)
        }
        let failure = reason ?? error
        if let continuation {
            continuation.resume(throwing: failure ?? URLError(.badServerResponse))
        }
        buffer.finish(failure)
        #if canImport(Darwin)
            pacer?.stop()
        #endif
        for action in actions { action() }
    }

    private func apply(_ action: URLSessionResponseBuffer.FlowAction) {
        switch action {
        case .suspend: task?.suspend()
        case .resume: task?.resume()
        case .cancel(let error): end(because: error)
        }
    }
}

/// What a response body's `next` closure captures: when the body is released, the request ends (unless it
/// was read to the end).
final class URLSessionBodyOwner: Sendable {
    let exchange: URLSessionExchange

    init(exchange: URLSessionExchange) {
        self.exchange = exchange
    }

    func next() async throws -> Data? {
        let exchange = exchange
        return try await withTaskCancellationHandler {
            try await exchange.nextChunk()
        } onCancel: {
            exchange.cancel()
        }
    }

    deinit {
        exchange.bodyDropped()
    }
}
