import AttachmentSync
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// One request of a ``URLSessionEngine``: its task, the wait for its response head, its body buffer, its
/// upload progress. The session's delegate forwards the task's callbacks here (on the delegate queue); the
/// Swift task that called `execute`, then the body's reader, wait here.
///
/// `@unchecked Sendable`: `task` is written once, in ``attach(task:)``,
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
    let pacer: URLSessionUploadPacer?

    init(method: HTTPRequestMethod, body: HTTPEngineRequestBody, buffer: URLSessionResponseBuffer) {
        self.method = method
        if case .file(let file) = body { fileBody = file } else { fileBody = nil }
        self.buffer = buffer
        pacer = fileBody?.throttle.map { URLSessionUploadPacer(throttle: $0) }
    }

    /// Sets the task (once, before it is shared; see the type's comment).
    func attach(task: URLSessionTask) {
        self.task = task
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
        pacer?.stop()
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
        // swift-corelibs-foundation reports an interim `100 Continue` (curl sends `Expect: 100-continue` with a
        // chunked body) as a response of its own; the final one follows.
        if let code = http?.statusCode, (100..<200).contains(code) { return }
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
        if method != .head, let encoding = head.headers.first(name: "Content-Encoding"),
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
        pacer?.sent(Int(bytes), task: task)
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
        buffer.statistics.recordCompleted()
        pacer?.stop()
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
