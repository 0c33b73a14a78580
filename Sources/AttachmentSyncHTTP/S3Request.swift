import AttachmentSync
import Foundation

/// One S3 request before it is authorised (signed, or sent to the URL a backend presigned for it).
struct S3Request: Sendable {
    enum Body: Sendable {
        case empty
        case data(Data)
        /// A byte range of a file, streamed; `onChunk` gets each chunk's size as it is sent.
        case file(URL, offset: Int64, length: Int64, onChunk: @Sendable (Int) -> Void)
    }

    var method: HTTPRequestMethod
    /// The object key, or `nil` for a request on the bucket.
    var key: String?
    var query: [(name: String, value: String)] = []
    /// Headers to sign and send (`host` and the `x-amz-` ones are added).
    var headers: [(name: String, value: String)] = []
    var body: Body = .empty
    var payload: SigV4Signer.Payload = .empty
    /// The S3 operation's name, for messages and the test observer.
    var operation: String
    var partNumber: Int?
    /// The whole file's size, for `CreateMultipartUpload` (a presigning backend checks it against its limit).
    var objectSize: Int64?

    var event: RequestEvent {
        RequestEvent(operation: operation, method: method.rawValue, object: key ?? "", partNumber: partNumber)
    }
}

extension S3Request.Body {
    /// The body as the HTTP client sends it: nothing, bytes, or the file range streamed, read through `files`.
    func requestBody(for method: HTTPRequestMethod, files: any FileOperations) -> HTTPEngineRequestBody {
        switch self {
        case .empty:
            return method == .put || method == .post ? .bytes(Data()) : .none
        case .data(let data):
            return .bytes(data)
        case .file(let url, let offset, let length, let onChunk):
            return .file(HTTPFileBody(url: url, offset: offset, length: length, files: files, onChunk: onChunk))
        }
    }

    /// The body's length in bytes.
    var length: Int64 {
        switch self {
        case .empty: 0
        case .data(let data): Int64(data.count)
        case .file(_, _, let length, _): length
        }
    }
}

/// A request whose streamed body may be sent more than once (an authorisation refused, then renewed): the
/// progress of each attempt is reported only past what an earlier attempt reported, so it never counts a
/// byte twice.
final class ProgressOnceRequest: Sendable {
    let request: S3Request
    private let counts: LockedValue<(reported: Int64, current: Int64)>

    init(_ request: S3Request) {
        let counts = LockedValue<(reported: Int64, current: Int64)>((0, 0))
        self.counts = counts
        guard case .file(let url, let offset, let length, let onChunk) = request.body else {
            self.request = request
            return
        }
        var wrapped = request
        wrapped.body = .file(url, offset: offset, length: length) { count in
            let fresh = counts.withLock { counts -> Int64 in
                counts.current += Int64(count)
                let fresh = max(0, counts.current - counts.reported)
                counts.reported = max(counts.reported, counts.current)
                return fresh
            }
            if fresh > 0 { onChunk(Int(fresh)) }
        }
        self.request = wrapped
    }

    /// Starts counting another attempt from byte 0.
    func startAttempt() {
        counts.withLock { $0.current = 0 }
    }
}

extension S3Request {
    func reportingProgressOnce() -> ProgressOnceRequest {
        ProgressOnceRequest(self)
    }
}
