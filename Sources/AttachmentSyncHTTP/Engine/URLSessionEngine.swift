import AttachmentSync
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// An ``HTTPEngine`` on Foundation's `URLSession`, through its delegate API only (the part that exists on
/// Apple platforms and in swift-corelibs-foundation on Linux alike).
///
/// - Redirects are refused (the 3xx response is returned); nothing is cached; no cookie is stored or sent.
/// - `Accept-Encoding: identity` is sent unless the request names an encoding. A response that still comes
///   with a `Content-Encoding` cannot be read raw through `URLSession` (it decodes gzip and friends itself,
///   on Linux whatever the request asked): its head is returned, and reading its body throws
///   ``URLSessionEngineError/encodedBody(_:)`` rather than hand over bytes the server did not send.
/// - A response body is buffered up to ``Limits/responseBuffer`` bytes while its reader is slower than the
///   network. Past that, on Apple platforms the task is suspended until the reader catches up; on Linux,
///   where suspending a data task restarts its request, further bytes wait in a temporary file instead
///   (memory stays bounded; the disk holds what the reader has not taken yet).
/// - A file body is read through its `files` layer: a range of at most ``Limits/inMemoryFileBody`` bytes
///   into memory, a longer one into a temporary copy sent as a file.
/// - An upload bandwidth cap (``HTTPFileBody/throttle``) is honoured chunk by chunk; see
///   `URLSessionEngine+Throttle.swift` for how on each platform.
package final class URLSessionEngine: HTTPEngine {
    /// Bounds on the memory one request may use.
    package struct Limits: Sendable {
        /// The most response-body bytes held in memory for a slow reader. The default is 1 MiB.
        package var responseBuffer = 1 << 20
        /// The longest file range read into memory to be sent; a longer one is sent from a temporary copy.
        /// The default is 64 MiB.
        package var inMemoryFileBody: Int64 = 64 << 20

        package init() {}
    }

    let session: URLSession
    let delegate: URLSessionEngineDelegate
    let limits: Limits
    /// Counters across this engine's requests.
    package let statistics = URLSessionEngineStatistics()
    let requestTimeout: Duration
    /// What the session's configuration is made from.
    let settings: Settings
    private let state = LockedValue(EngineState())

    struct Settings: Sendable {
        var idleTimeout: Duration
        var maximumConnectionsPerHost: Int
    }

    struct EngineState {
        var isShutDown = false
    }

    /// Creates an engine with its own session.
    ///
    /// - Parameters:
    ///   - connectTimeout: How long a request may wait without any byte moving before its response head
    ///     arrives. `URLSession` has one idle timeout, so it is the longer of this and `requestTimeout`.
    ///     The default is 10 seconds.
    ///   - requestTimeout: How long a request may go without any byte moving, in either direction
    ///     (`timeoutIntervalForRequest`). No overall limit is set: a large transfer that keeps moving is never
    ///     cut (the transport's slow-transfer watchdog judges its pace). The default is 60 seconds.
    ///   - maximumConnectionsPerHost: The most connections open to one host at once. The default is 16.
    ///   - limits: Memory bounds. The default is ``Limits/init()``.
    package init(
        connectTimeout: Duration = .seconds(10), requestTimeout: Duration = .seconds(60),
        maximumConnectionsPerHost: Int = 16, limits: Limits = Limits()
    ) {
        settings = Settings(
            idleTimeout: max(connectTimeout, requestTimeout),
            maximumConnectionsPerHost: max(1, maximumConnectionsPerHost))
        self.limits = limits
        self.requestTimeout = max(connectTimeout, requestTimeout)
        delegate = URLSessionEngineDelegate()
        session = URLSession(
            configuration: Self.configuration(settings), delegate: delegate, delegateQueue: Self.delegateQueue())
    }

    /// An ephemeral configuration without cache, cookies or stored credentials.
    static func configuration(_ settings: Settings) -> URLSessionConfiguration {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.urlCredentialStorage = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalAndRemoteCacheData
        configuration.httpMaximumConnectionsPerHost = settings.maximumConnectionsPerHost
        configuration.timeoutIntervalForRequest = seconds(settings.idleTimeout)
        // timeoutIntervalForResource keeps its default (7 days): no overall limit on a transfer that moves.
        return configuration
    }

    /// A serial delegate queue: a task's callbacks arrive in order, one at a time.
    static func delegateQueue() -> OperationQueue {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        queue.name = "AttachmentSync.URLSessionEngine"
        return queue
    }

    static func seconds(_ duration: Duration) -> TimeInterval {
        let (seconds, attoseconds) = duration.components
        return TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
    }

    package func execute(_ request: HTTPEngineRequest) async throws -> HTTPEngineResponse {
        try Task.checkCancellation()
        guard !state.withLock({ $0.isShutDown }) else { throw URLSessionEngineError.shutDown }
        let urlRequest = try makeURLRequest(request)
        let exchange = URLSessionExchange(
            method: request.method, body: request.body,
            buffer: URLSessionResponseBuffer(limit: limits.responseBuffer, statistics: statistics))
        let prepared: PreparedBody
        do {
            prepared = try await prepareBody(request.body, for: exchange)
        } catch {
            exchange.didComplete(error: error)  // runs its clean-up (a temporary copy)
            throw error
        }
        startTask(urlRequest, body: prepared, exchange: exchange)
        let head = try await withTaskCancellationHandler {
            try await exchange.waitForHead()
        } onCancel: {
            exchange.cancel()
        }
        let owner = URLSessionBodyOwner(exchange: exchange)
        return HTTPEngineResponse(
            status: head.status, headers: head.headers,
            body: HTTPResponseBody { try await owner.next() })
    }

    /// Creates the task of `request` and registers the exchange with the session's delegate;
    /// ``URLSessionExchange/waitForHead()`` resumes it.
    private func startTask(_ request: URLRequest, body: PreparedBody, exchange: URLSessionExchange) {
        let task: URLSessionTask
        switch body.kind {
        case .none: task = session.dataTask(with: request)
        case .data(let data): task = session.uploadTask(with: request, from: data)
        case .file(let url): task = session.uploadTask(with: request, fromFile: url)
        }
        exchange.attach(task: task)
        delegate.register(exchange, for: task.taskIdentifier)
    }

    /// Ends the engine: every running request is cancelled (its reader gets `CancellationError` or the
    /// ``URLSessionEngineError/shutDown`` error) and the session lets go of its delegate. Later requests throw
    /// ``URLSessionEngineError/shutDown``.
    ///
    /// `invalidateAndCancel()` rather than `finishTasksAndInvalidate()`: a caller shutting the engine down has
    /// stopped waiting for its requests, and a response body nobody reads would otherwise keep the session
    /// (and its delegate) alive until the server finished sending.
    package func shutdown() async throws {
        shutdownInBackground()
        await delegate.waitUntilInvalidated()
    }

    package func shutdownInBackground() {
        let first = state.withLock { state -> Bool in
            defer { state.isShutDown = true }
            return !state.isShutDown
        }
        guard first else { return }
        delegate.failAll(URLSessionEngineError.shutDown)
        session.invalidateAndCancel()
    }

    deinit {
        // URLSession keeps its delegate (and so this engine's state) until it is invalidated.
        shutdownInBackground()
    }
}

/// The errors of ``URLSessionEngine`` other than the `URLError`s `URLSession` reports.
package enum URLSessionEngineError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The engine was shut down before or during the request.
    case shutDown
    /// The request's URL is not one `URLSession` accepts.
    case invalidURL(String)
    /// The response came with this `Content-Encoding`, which `URLSession` decodes: its bytes cannot be read
    /// as the server sent them.
    case encodedBody(String)

    package var description: String {
        switch self {
        case .shutDown: "the URLSession engine was shut down"
        case .invalidURL(let url): "URLSession does not accept the URL \(url)"
        case .encodedBody(let encoding):
            "the response has Content-Encoding: \(encoding), which URLSession decodes; its raw bytes cannot be read"
        }
    }
}
