import AttachmentSync

/// The HTTP response behind a failed request of ``S3RemoteStorage`` or ``HTTPRemoteStorage``: found as the
/// `AttachmentError.underlying` error of the `AttachmentError` the adapter throws.
///
/// It holds what the server said (status, S3 error code and message, request id), never the request's
/// headers, so it carries no credentials.
///
/// ```swift
/// catch let error as AttachmentError {
///     if let http = error.underlying as? RemoteHTTPError, http.code == "SlowDown" { … }
/// }
/// ```
public struct RemoteHTTPError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The HTTP status code, `403` say.
    public var statusCode: Int
    /// The S3 error code (`NoSuchKey`, `SignatureDoesNotMatch`, `SlowDown`…), when the body had one.
    public var code: String?
    /// The server's error message, when the body had one (shortened to 300 characters).
    public var message: String?
    /// The server's request id (`x-amz-request-id`), for its operator's logs, when it sent one.
    public var requestId: String?

    /// Creates an error. The adapters create these.
    ///
    /// - Parameters:
    ///   - statusCode: The HTTP status code.
    ///   - code: The S3 error code. The default is `nil`.
    ///   - message: The server's message. The default is `nil`.
    ///   - requestId: The server's request id. The default is `nil`.
    public init(statusCode: Int, code: String? = nil, message: String? = nil, requestId: String? = nil) {
        self.statusCode = statusCode
        self.code = code
        self.message = message
        self.requestId = requestId
    }

    /// `HTTP 403 SignatureDoesNotMatch: message (request id …)`, with the parts that are known.
    public var description: String {
        var text = "HTTP \(statusCode)"
        if let code { text += " \(code)" }
        if let message, !message.isEmpty { text += ": \(message)" }
        if let requestId { text += " (request id \(requestId))" }
        return text
    }
}

extension RemoteHTTPError: RemoteOverloadSignal {
    /// `true` for 429 (Too Many Requests) and 503 (Service Unavailable, S3's SlowDown): the server is
    /// overloaded, and the queue runs fewer transfers at once.
    public var isOverload: Bool { statusCode == 429 || statusCode == 503 }
}
