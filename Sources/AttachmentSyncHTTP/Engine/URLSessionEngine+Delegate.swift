import AttachmentSync
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The delegate of a ``URLSessionEngine``'s session: forwards each task's callbacks to its
/// ``URLSessionExchange`` (found by task identifier, unique within the session), refuses redirects, and
/// tells when the session is invalidated.
///
/// `Sendable`: its stored properties are `let`s of `Sendable` types (`LockedValue`).
final class URLSessionEngineDelegate: NSObject, URLSessionDataDelegate, Sendable {
    private let exchanges = LockedValue<[Int: URLSessionExchange]>([:])
    private let invalidation = LockedValue<(done: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func register(_ exchange: URLSessionExchange, for taskIdentifier: Int) {
        exchanges.withLock { $0[taskIdentifier] = exchange }
    }

    private func exchange(for task: URLSessionTask) -> URLSessionExchange? {
        exchanges.withLock { $0[task.taskIdentifier] }
    }

    /// Ends every running request with `error` (the engine is shutting down).
    func failAll(_ error: any Error) {
        for exchange in exchanges.withLock({ Array($0.values) }) {
            exchange.end(because: error)
        }
    }

    /// Returns once the session was invalidated and has let go of this delegate.
    func waitUntilInvalidated() async {
        await withCheckedContinuation { continuation in
            let done = invalidation.withLock { state -> Bool in
                if !state.done { state.waiters.append(continuation) }
                return state.done
            }
            if done { continuation.resume() }
        }
    }

    func urlSession(_ session: URLSession, didBecomeInvalidWithError error: (any Error)?) {
        let waiters = invalidation.withLock { state in
            state.done = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        completionHandler(.allow)
        exchange(for: dataTask)?.didReceive(response: response)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        exchange(for: dataTask)?.didReceive(data: data)
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(nil)  // the 3xx response itself is the answer
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64,
        totalBytesExpectedToSend: Int64
    ) {
        exchange(for: task)?.didSend(bytes: bytesSent)
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask,
        willCacheResponse proposedResponse: CachedURLResponse,
        completionHandler: @escaping @Sendable (CachedURLResponse?) -> Void
    ) {
        completionHandler(nil)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let exchange = exchanges.withLock { $0.removeValue(forKey: task.taskIdentifier) }
        exchange?.didComplete(error: error)
    }
}
