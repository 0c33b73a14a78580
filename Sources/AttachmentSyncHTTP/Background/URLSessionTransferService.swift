import AttachmentSync
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A `BackgroundTransferService` on `URLSession`: on Apple platforms a background session, whose transfers
/// go on while the app is suspended or terminated and which relaunches the app to report them.
///
/// Make it once, early in the app's launch (before or while the queue starts), with the same identifier
/// every time: the system hands the session's events to the session of that identifier, and the results
/// of transfers that finished while the app was not running arrive as soon as it exists. Each result is
/// written durably into ``Configuration/folder`` (a download's body moved there first) before the system is
/// told it was handled; it waits there until the queue adopts it.
///
/// ```swift
/// // At launch:
/// let transfers = try URLSessionTransferService(
///     configuration: .init(identifier: "com.example.app.attachments", folder: supportFolder.appending(path: "transfers")))
/// var configuration = AttachmentQueue.Configuration(attachmentsDirectory: directory)
/// configuration.backgroundTransfers = BackgroundTransfers(service: transfers)
///
/// // In the app delegate:
/// func application(
///     _ application: UIApplication, handleEventsForBackgroundURLSession identifier: String,
///     completionHandler: @escaping () -> Void
/// ) {
///     transfers.handleEventsForBackgroundURLSession(identifier, completionHandler: completionHandler)
/// }
/// ```
///
/// On Linux there are no background sessions: the transfers run in this process's `URLSession`
/// (FoundationNetworking) and end with it; that is how the service's own code is tested here.
public final class URLSessionTransferService: BackgroundTransferService {
    /// How the service's session is set up.
    public struct Configuration: Sendable {
        /// The background session's identifier. Unique to this service: an app extension that hands transfers
        /// over too needs a service of its own, with another identifier.
        public var identifier: String
        /// The folder where results and downloaded bodies wait until the queue acknowledges them. Put it in
        /// the app's Application Support folder (or the app group's container when an extension adopts
        /// results), on the same volume as the attachments directory so that adopting a download links the
        /// file instead of copying it.
        public var folder: URL
        /// The app group whose container the session downloads into, for a service made in an app
        /// extension (see `URLSessionConfiguration.sharedContainerIdentifier`). Apple platforms only. The
        /// default is `nil`.
        public var sharedContainerIdentifier: String?
        /// Whether the system may wait for a good moment (power, Wi-Fi) before it runs each transfer (see
        /// `URLSessionConfiguration.isDiscretionary`). Transfers handed over while the app is in the
        /// background are scheduled at the system's discretion whatever this says. Apple platforms only.
        /// The default is `false`.
        public var isDiscretionary: Bool = false

        /// A configuration with the defaults, the given identifier and folder.
        public init(identifier: String, folder: URL) {
            self.identifier = identifier
            self.folder = folder
        }
    }

    /// The service's configuration.
    public let configuration: Configuration
    let folder: TransferFolder
    let session: URLSession
    let delegate: URLSessionTransferDelegate

    /// Creates the service and its session (on Apple platforms, the background session of
    /// ``Configuration/identifier``), creating the folder.
    ///
    /// - Throws: `AttachmentError` with code `invalidConfiguration` for
    ///   an empty identifier; the file system's error when the folder cannot be created.
    public init(configuration: Configuration) throws {
        guard !configuration.identifier.isEmpty else {
            throw AttachmentError(
                code: .invalidConfiguration, message: "the background session's identifier is empty",
                name: "identifier")
        }
        self.configuration = configuration
        folder = try TransferFolder(configuration.folder)
        delegate = URLSessionTransferDelegate(folder: folder)
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        queue.name = "AttachmentSync.URLSessionTransferService"
        session = URLSession(
            configuration: Self.sessionConfiguration(configuration), delegate: delegate, delegateQueue: queue)
    }

    /// Starts the transfer's task in the session, named by the transfer's id.
    ///
    /// - Throws: `AttachmentError` with code `invalidName` for an id that
    ///   cannot name a file, `invalidConfiguration` for an upload without
    ///   a body file or a request that is not HTTP(S).
    public func hand(_ transfer: BackgroundTransfer) async throws {
        try TransferFolder.checkId(transfer.id)
        let url = transfer.request.url
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil else {
            throw AttachmentError(
                code: .invalidConfiguration, message: "\(url) is not an HTTP(S) URL", name: url.absoluteString)
        }
        var request = URLRequest(url: url)
        request.httpMethod = transfer.request.method
        request.httpShouldHandleCookies = false
        for header in transfer.request.headers {
            request.addValue(header.value, forHTTPHeaderField: header.name)
        }
        Self.restrictNetwork(&request, unmetered: transfer.requiresUnmeteredNetwork)
        let task: URLSessionTask
        switch transfer.direction {
        case .upload:
            guard let body = transfer.bodyFile else {
                throw AttachmentError(
                    code: .invalidConfiguration, message: "the upload \(transfer.id) has no body file",
                    name: transfer.id)
            }
            task = session.uploadTask(with: request, fromFile: body)
        case .download:
            if request.value(forHTTPHeaderField: "Accept-Encoding") == nil {
                // The body is kept as the server sent it: the queue checks its SHA-256.
                request.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
            }
            task = session.downloadTask(with: request)
        }
        task.taskDescription = transfer.id
        task.resume()
    }

    /// The ids of the session's tasks, completed ones included.
    ///
    /// The session lists a task until it is invalidated, which follows the delegate's last call for it, and
    /// runs the handler on the delegate queue, which is serial: a completed task listed there has its
    /// result still to be written. Leaving it out would let the queue see a transfer neither running nor
    /// reported, and take it back while its result is on the way.
    public func running() async throws -> Set<String> {
        await withCheckedContinuation { continuation in
            session.getTasksWithCompletionHandler { data, uploads, downloads in
                var ids: Set<String> = []
                for task in data as [URLSessionTask] + uploads + downloads {
                    if let id = task.taskDescription { ids.insert(id) }
                }
                continuation.resume(returning: ids)
            }
        }
    }

    /// The results kept in the folder.
    public func results() async throws -> [BackgroundTransferResult] {
        try folder.storedResults()
    }

    /// Removes the result and its body from the folder.
    public func acknowledge(_ id: String) async throws {
        try folder.forget(id)
    }

    /// Yields once at once (results may wait from before), then after each result is written.
    public func resultsMayHaveArrived() -> AsyncStream<Void> {
        delegate.subscribe()
    }

    /// Keeps the completion handler the system gave the app for this service's session, and calls it (on the
    /// main actor) once the session has delivered every event and each result is in the folder. Call it from
    /// `application(_:handleEventsForBackgroundURLSession:completionHandler:)` (or the scene and
    /// extension counterparts); returns `false`, keeping nothing, when `identifier` is another session's.
    @MainActor @discardableResult
    public func handleEventsForBackgroundURLSession(
        _ identifier: String, completionHandler: @escaping @MainActor () -> Void
    ) -> Bool {
        guard identifier == configuration.identifier else { return false }
        delegate.events.keep(completionHandler)
        return true
    }

    /// Cancels every task and lets go of the session (tests; an app keeps its background session).
    public func invalidateAndCancel() {
        session.invalidateAndCancel()
    }
}

/// The session's delegate: writes each finished task's result (and a download's body) into the folder before
/// it returns, then tells the subscribers; refuses redirects where the session asks.
///
/// `Sendable`: its stored properties are `let`s of `Sendable` types.
final class URLSessionTransferDelegate: NSObject, URLSessionDataDelegate, URLSessionDownloadDelegate, Sendable {
    let folder: TransferFolder
    let events = BackgroundSessionEvents()
    private let subscribers = LockedValue<[UUID: AsyncStream<Void>.Continuation]>([:])

    init(folder: TransferFolder) {
        self.folder = folder
    }

    func subscribe() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let key = UUID()
        subscribers.withLock { $0[key] = continuation }
        continuation.onTermination = { [weak self] _ in self?.subscribers.withLock { _ = $0.removeValue(forKey: key) } }
        continuation.yield()
        return stream
    }

    /// The transfer id a task carries, when it is one this service could have named.
    private static func id(of task: URLSessionTask) -> String? {
        guard let id = task.taskDescription, (try? TransferFolder.checkId(id)) != nil else { return nil }
        return id
    }

    func urlSession(
        _ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL
    ) {
        // The file is gone once this returns: moved now, under the body's name, whatever the status (the
        // result decides whether it is kept).
        guard let id = Self.id(of: downloadTask) else { return }
        try? folder.install(folder.bodyURL(id)) { temporary in
            try FileManager.default.moveItem(at: location, to: temporary)
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        guard let id = Self.id(of: task) else { return }
        let response = task.response as? HTTPURLResponse
        var result = BackgroundTransferResult(id: id, statusCode: nil)
        if let error {
            result.error = "\(error)"
        } else if let response {
            result.statusCode = response.statusCode
            result.headers = response.allHeaderFields.map {
                PreparedRequest.Header(name: "\($0.key)", value: "\($0.value)")
            }
        } else {
            result.error = "the task ended without a response"
        }
        let body = folder.bodyURL(id)
        if task is URLSessionDownloadTask, let status = result.statusCode, (200..<300).contains(status),
            FileManager.default.fileExists(atPath: body.path)
        {
            result.bodyFile = body
        } else {
            try? folder.remove(body)
        }
        do {
            try folder.write(result, to: folder.resultURL(id))
        } catch {
            // Not written: the queue finds the transfer neither running nor reported and takes it back.
            return
        }
        for subscriber in subscribers.withLock({ Array($0.values) }) { subscriber.yield() }
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        // A presigned request goes where it was signed for, or fails. (Apple's background sessions do not
        // ask: they follow redirects themselves. What arrives is checked all the same: a download's SHA-256
        // before it is adopted, an upload's object on the remote before it counts.)
        completionHandler(nil)
    }
}

/// The completion handler the system gave the app for the session's events, kept on the main actor.
@MainActor
final class BackgroundSessionEvents {
    private var completionHandler: (@MainActor () -> Void)?

    nonisolated init() {}

    func keep(_ handler: @escaping @MainActor () -> Void) {
        completionHandler = handler
    }

    /// Calls the kept handler, once.
    func finish() {
        let handler = completionHandler
        completionHandler = nil
        handler?()
    }
}
