import Foundation

/// An error of the attachment layer: a bad name, a missing attachment or file, a failed transfer, a closed
/// queue.
///
/// Match on ``code``; the other properties carry the context: the attachment's id, the offending name,
/// the path involved and the underlying error.
///
/// ```swift
/// do {
///     try await queue.deleteFile(attachmentId: id) { _, _ in }
/// } catch let error as AttachmentError where error.code == .attachmentNotFound {
///     // already gone
/// }
/// ```
public struct AttachmentError: Error, Sendable, CustomStringConvertible, LocalizedError {
    /// What went wrong.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Sendable {
            case invalidWatchedItem
            case invalidName
            case invalidConfiguration
            case attachmentNotFound
            case alreadyExists
            case localFileNotFound
            case remoteNotFound
            case fileSystem
            case integrityMismatch
            case closed
            case accessDenied
            case remoteUnavailable
            case remoteFailure
            case unsupported
            case invalidState
            case directoryInUse
            case timedOut
            case conflict
            case keyUnavailable
        }

        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// A ``WatchedAttachmentItem`` has neither a file extension nor a filename, so the file it stands
        /// for cannot be named.
        public static let invalidWatchedItem = Code(.invalidWatchedItem)
        /// An id, file extension, filename or subdirectory cannot be used as a file name: it is empty, too
        /// long, `.` or `..`, or contains `/`, `\`, NUL or another control character. ``AttachmentError/name``
        /// holds it. Nothing was written.
        public static let invalidName = Code(.invalidName)
        /// A queue option is out of range (a negative interval, say). ``AttachmentError/name`` names it.
        public static let invalidConfiguration = Code(.invalidConfiguration)
        /// No attachment has the given id.
        public static let attachmentNotFound = Code(.attachmentNotFound)
        /// An attachment with the given id already exists (or is being saved right now).
        public static let alreadyExists = Code(.alreadyExists)
        /// A local file the operation needs is missing. ``AttachmentError/path`` holds its path.
        public static let localFileNotFound = Code(.localFileNotFound)
        /// Remote storage has no file for the attachment.
        public static let remoteNotFound = Code(.remoteNotFound)
        /// A file system operation failed. ``AttachmentError/path`` and ``AttachmentError/underlying`` say
        /// which and why.
        public static let fileSystem = Code(.fileSystem)
        /// Downloaded content does not match the SHA-256 recorded for the attachment. The file was discarded;
        /// the download is retried with backoff.
        public static let integrityMismatch = Code(.integrityMismatch)
        /// The queue was closed with ``AttachmentQueue/close()``.
        public static let closed = Code(.closed)
        /// Remote storage refused the request: missing or wrong credentials, an expired token, no
        /// permission. Retrying soon will not help; the queue's backoff still applies.
        public static let accessDenied = Code(.accessDenied)
        /// Remote storage could not be reached or asked to slow down: connection refused or reset, a
        /// timeout, HTTP 429 or 5xx. Worth retrying; ``AttachmentError/retryAfter`` holds the server's
        /// hint when it gave one.
        public static let remoteUnavailable = Code(.remoteUnavailable)
        /// Remote storage rejected the request for another reason (a bad request, say).
        /// ``AttachmentError/underlying`` says more.
        public static let remoteFailure = Code(.remoteFailure)
        /// The adapter cannot do what was asked (a ranged read, say).
        public static let unsupported = Code(.unsupported)
        /// The attachment is not in a state that allows the operation (purging content that is not
        /// uploaded yet, say). The message names the state.
        public static let invalidState = Code(.invalidState)
        /// Another process of the app holds the transfer lease of the attachments table (see
        /// ``AttachmentQueue/Configuration/leaseDuration``), and the operation needs it (a repair, say):
        /// nothing was changed. ``AttachmentError/path`` holds the attachments directory. Stop syncing in the
        /// other process (or stop it) first; a lease whose process is gone runs out by itself.
        public static let directoryInUse = Code(.directoryInUse)
        /// What the call waited for did not happen in the time it was given (see
        /// ``AttachmentQueue/waitUntilUploaded(attachmentId:timeout:)``). Nothing was changed.
        public static let timedOut = Code(.timedOut)
        /// Remote storage holds different content under the attachment's name: another device uploaded
        /// other bytes for the same id (or a reinstall reused it). Nothing was replaced: the upload is given
        /// up at once, this device's bytes stay in its local file, and the app chooses with
        /// ``AttachmentQueue/resolveConflict(attachmentId:keeping:)``. ``AttachmentError/name`` names the
        /// remote file.
        public static let conflict = Code(.conflict)

        /// The encryption key an attachment is (or is to be) encrypted with is not on this device (see
        /// ``KeyProvider``). Nothing is lost or given up: the transfer waits without spending an attempt and
        /// runs once the key provider has the key. ``AttachmentError/name`` holds the key's id.
        public static let keyUnavailable = Code(.keyUnavailable)

        /// A readable name, for logs and test failures.
        public var description: String { value.rawValue }
    }

    /// What went wrong.
    public var code: Code
    /// A human-readable explanation that names the offending value.
    public var message: String
    /// The attachment the error is about, when there is one.
    public var attachmentId: String?
    /// The offending name or option, when there is one.
    public var name: String?
    /// The file path the error is about, when there is one.
    public var path: String?
    /// The error that caused this one, when there is one.
    public var underlying: (any Error)?
    /// How long the server asked to wait before trying again (HTTP `Retry-After`), when it said. The
    /// queue waits at least this long before the next attempt.
    public var retryAfter: Duration?

    /// Creates an error. The library creates these; adapters may throw them too.
    public init(
        code: Code,
        message: String,
        attachmentId: String? = nil,
        name: String? = nil,
        path: String? = nil,
        underlying: (any Error)? = nil,
        retryAfter: Duration? = nil
    ) {
        self.code = code
        self.message = message
        self.attachmentId = attachmentId
        self.name = name
        self.path = path
        self.underlying = underlying
        self.retryAfter = retryAfter
    }

    /// A readable description, for logs, `last_error` and test failures: the code, then the message, then
    /// the underlying error when the message does not already say it (`accessDenied: S3 GetObject of
    /// "a.jpg" failed: HTTP 403 AccessDenied (request id …)`).
    public var description: String {
        var text = "\(code): \(message)"
        if let underlying {
            let detail = "\(underlying)"
            if !message.contains(detail) { text += " (\(detail))" }
        }
        return text
    }

    /// The same text as `description`, for `localizedDescription`.
    public var errorDescription: String? { description }
}

/// The error enum of the PowerSync attachment helpers' docs, for code that throws or matches it (the docs'
/// `PowerSyncAttachmentError.attachmentError("…")`).
///
/// The library itself throws ``AttachmentError``, which carries a code and context.
public enum PowerSyncAttachmentError: Error, Sendable, Hashable, CustomStringConvertible, LocalizedError {
    /// A general error.
    case generalError(String)
    /// Something was not found.
    case notFound(String)
    /// A file was not found.
    case fileNotFound(String)
    /// A path was invalid.
    case invalidPath(String)
    /// An attachment error.
    case attachmentError(String)
    /// The queue was closed.
    case closed(String)

    /// The case's message.
    public var description: String {
        switch self {
        case .generalError(let message), .notFound(let message), .fileNotFound(let message),
            .invalidPath(let message), .attachmentError(let message), .closed(let message):
            message
        }
    }

    /// The same text as `description`, for `localizedDescription`.
    public var errorDescription: String? { description }
}
