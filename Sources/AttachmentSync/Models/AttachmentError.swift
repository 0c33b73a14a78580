import Foundation

/// An error of the attachment layer: a bad watched item, a name the file system must not see, a missing
/// attachment, a failed transfer.
///
/// Match on ``code``; the other properties carry the context (the attachment's id, the path involved and
/// the underlying error).
public struct AttachmentError: Error, Sendable, CustomStringConvertible, LocalizedError {
    /// What went wrong.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Sendable {
            case invalidWatchedItem
        }

        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// A ``WatchedAttachmentItem`` has neither a file extension nor a filename, so the file it stands
        /// for cannot be named.
        public static let invalidWatchedItem = Code(.invalidWatchedItem)

        /// A readable description, for logs and test failures.
        public var description: String { value.rawValue }
    }

    /// What went wrong.
    public var code: Code
    /// A human-readable explanation that names the offending value.
    public var message: String
    /// The attachment the error is about, when there is one.
    public var attachmentId: String?
    /// The file path the error is about, when there is one.
    public var path: String?
    /// The error that caused this one, when there is one.
    public var underlying: (any Error)?

    /// Creates an error. The library creates these; apps usually only inspect them.
    public init(
        code: Code,
        message: String,
        attachmentId: String? = nil,
        path: String? = nil,
        underlying: (any Error)? = nil
    ) {
        self.code = code
        self.message = message
        self.attachmentId = attachmentId
        self.path = path
        self.underlying = underlying
    }

    /// A readable description, for logs and test failures.
    public var description: String {
        var text = "AttachmentError.\(code): \(message)"
        if let underlying { text += " (\(underlying))" }
        return text
    }

    /// The same text as `description`, for `localizedDescription`.
    public var errorDescription: String? { description }
}
