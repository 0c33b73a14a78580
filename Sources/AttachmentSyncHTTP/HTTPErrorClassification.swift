import AttachmentSync
import Foundation

/// Turns HTTP failures into `AttachmentError` values with the right code, for both adapters.
///
/// Messages name the service, the operation, the object and what the server said; they never contain
/// request headers, signatures, credentials or presigned URLs.
enum HTTPErrorClassification {
    /// S3 error codes that mean bad, expired or insufficient credentials, whatever the status.
    static let accessDeniedCodes: Set<String> = [
        "AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "ExpiredToken", "InvalidToken",
        "TokenRefreshRequired", "RequestTimeTooSkewed", "AuthorizationHeaderMalformed", "AllAccessDisabled",
    ]
    /// S3 error codes that mean the body did not match its checksum.
    static let integrityCodes: Set<String> = [
        "BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch", "BadChecksum", "InvalidChecksum",
    ]
    /// S3 error codes worth retrying later, whatever the status.
    static let unavailableCodes: Set<String> = [
        "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling", "ThrottlingException",
    ]

    /// The error for a response with an unexpected status.
    ///
    /// - Parameters:
    ///   - service: `S3` or `HTTP`, for the message.
    ///   - operation: What was attempted (`GetObject`, `PUT`…), for the message.
    ///   - object: The key or path, for the message.
    static func error(
        status: HTTPStatus, headers: HTTPHeaderFields, body: Data?, service: String, operation: String,
        object: String, attachmentId: String?, now: Date
    ) -> AttachmentError {
        let parsed = body.flatMap { S3XML.parseError($0) }
        let detail = RemoteHTTPError(
            statusCode: Int(status.code), code: parsed?.code, message: parsed?.message.map { shorten($0) },
            requestId: headers.first(name: "x-amz-request-id"))
        let code = classify(status: Int(status.code), s3Code: parsed?.code)
        let retryAfter = code == .remoteUnavailable ? retryAfter(headers.first(name: "retry-after"), now: now) : nil
        return AttachmentError(
            code: code,
            message: "\(subject(service, operation, object)) failed: \(detail)",
            attachmentId: attachmentId,
            name: object,
            underlying: detail,
            retryAfter: retryAfter)
    }

    /// The attachment error code for an HTTP status and S3 error code.
    static func classify(status: Int, s3Code: String?) -> AttachmentError.Code {
        if let s3Code {
            if accessDeniedCodes.contains(s3Code) { return .accessDenied }
            if integrityCodes.contains(s3Code) { return .integrityMismatch }
            if unavailableCodes.contains(s3Code) { return .remoteUnavailable }
            if s3Code == "NoSuchKey" { return .remoteNotFound }
        }
        switch status {
        case 404 where s3Code == nil: return .remoteNotFound
        case 401, 403: return .accessDenied
        case 408, 429, 500...599: return .remoteUnavailable
        default: return .remoteFailure
        }
    }

    /// The error for a request that got no response: connection refused or reset, a timeout. Cancellation
    /// stays `CancellationError`.
    static func transportError(
        _ error: any Error, service: String, operation: String, object: String, attachmentId: String?
    ) -> any Error {
        if error is CancellationError || Task.isCancelled {
            return CancellationError()
        }
        if let attachmentError = error as? AttachmentError {
            return attachmentError
        }
        if case .encodedBody(let encoding)? = error as? URLSessionEngineError {
            // The server answered, with bytes URLSession decodes before anyone sees them: asking again gets
            // the same answer, so this is no unreachable server to wait for.
            return AttachmentError(
                code: .remoteFailure,
                message: "\(subject(service, operation, object)) failed: the server sent the content with "
                    + "Content-Encoding: \(encoding), which the URLSession transport cannot read as stored (use "
                    + "the AsyncHTTPClient transport, or store the file without an encoding)",
                attachmentId: attachmentId, name: object, underlying: error)
        }
        return AttachmentError(
            code: .remoteUnavailable,
            message: "\(subject(service, operation, object)) failed: the server could not be "
                + "reached or did not answer in time",
            attachmentId: attachmentId,
            name: object,
            underlying: error)
    }

    /// `S3 GetObject of "a.jpg"`, or `S3 CreateBucket` for a request on no object (a bucket's own requests).
    static func subject(_ service: String, _ operation: String, _ object: String) -> String {
        object.isEmpty ? "\(service) \(operation)" : "\(service) \(operation) of \(String(reflecting: object))"
    }

    /// `Retry-After` as a duration: delay-seconds, or an HTTP date (how long from `now`, never negative).
    static func retryAfter(_ value: String?, now: Date) -> Duration? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if let seconds = Int64(value), seconds >= 0 {
            return .seconds(seconds)
        }
        for format in ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"] {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "GMT")
            formatter.dateFormat = format
            if let date = formatter.date(from: value) {
                let seconds = max(0, date.timeIntervalSince(now))
                return .milliseconds(Int64(clamping: (seconds * 1000).rounded(.up)))
            }
        }
        return nil
    }

    static func shorten(_ text: String, to limit: Int = 300) -> String {
        text.count <= limit ? text : String(text.prefix(limit)) + "…"
    }
}
