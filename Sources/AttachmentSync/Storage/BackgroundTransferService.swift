import Foundation

/// An HTTP request formed ahead of time and complete: a background service sends it as it is, without
/// asking this process anything (a presigned URL and its headers, say).
public struct PreparedRequest: Sendable, Hashable, Codable {
    /// One header field.
    public struct Header: Sendable, Hashable, Codable {
        /// The field's name, as sent.
        public var name: String
        /// The field's value.
        public var value: String

        /// Creates a header field.
        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    /// The HTTP method: `PUT` for an upload, `GET` for a download.
    public var method: String
    /// The whole URL, query included.
    public var url: URL
    /// The header fields, in order.
    public var headers: [Header]

    /// Creates a request.
    public init(method: String, url: URL, headers: [Header] = []) {
        self.method = method
        self.url = url
        self.headers = headers
    }
}

/// One transfer handed to a ``BackgroundTransferService``: what to send, and for an upload the file whose
/// bytes are the body.
public struct BackgroundTransfer: Sendable, Hashable, Codable, Identifiable {
    /// Which way the bytes go.
    public enum Direction: String, Sendable, Hashable, Codable {
        /// The body is ``BackgroundTransfer/bodyFile``, sent whole.
        case upload
        /// The response's body is kept in a file the service reports.
        case download
    }

    /// The hand-off's identifier: unique among every transfer the service is handed, and what its result
    /// carries back. A service that names its own tasks (a background `URLSession`'s `taskDescription`)
    /// stores it there.
    public var id: String
    /// Which way the bytes go.
    public var direction: Direction
    /// The request to send.
    public var request: PreparedRequest
    /// For an upload, the file sent as the body (whole). `nil` for a download.
    public var bodyFile: URL?
    /// Whether the transfer waits for an unmetered network (no cellular data, no Low Data Mode), as the
    /// queue's ``NetworkPolicy`` asks for its attachment. The default is `false`.
    public var requiresUnmeteredNetwork: Bool

    /// Creates a transfer.
    public init(
        id: String, direction: Direction, request: PreparedRequest, bodyFile: URL? = nil,
        requiresUnmeteredNetwork: Bool = false
    ) {
        self.id = id
        self.direction = direction
        self.request = request
        self.bodyFile = bodyFile
        self.requiresUnmeteredNetwork = requiresUnmeteredNetwork
    }

    private enum CodingKeys: String, CodingKey {
        case id, direction, request, bodyFile, requiresUnmeteredNetwork
    }

    /// Decodes a transfer; one written without ``requiresUnmeteredNetwork`` takes `false`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(String.self, forKey: .id)
        direction = try container.decode(Direction.self, forKey: .direction)
        request = try container.decode(PreparedRequest.self, forKey: .request)
        bodyFile = try container.decodeIfPresent(URL.self, forKey: .bodyFile)
        requiresUnmeteredNetwork =
            try container.decodeIfPresent(Bool.self, forKey: .requiresUnmeteredNetwork) ?? false
    }
}

/// What became of a handed-off transfer: the response the server gave (and for a download, the file holding
/// its body), or why none came.
public struct BackgroundTransferResult: Sendable, Hashable, Codable, Identifiable {
    /// The ``BackgroundTransfer/id`` of the transfer.
    public var id: String
    /// The response's status code, or `nil` when no response came (``error`` says why).
    public var statusCode: Int?
    /// The response's header fields.
    public var headers: [PreparedRequest.Header]
    /// For a download that got a response: the file holding its body. It belongs to the service until the
    /// result is acknowledged; whoever adopts it moves or copies it first.
    public var bodyFile: URL?
    /// Why no response came (the connection failed, the service gave the transfer up), or `nil`.
    public var error: String?

    /// Creates a result.
    public init(
        id: String, statusCode: Int?, headers: [PreparedRequest.Header] = [], bodyFile: URL? = nil,
        error: String? = nil
    ) {
        self.id = id
        self.statusCode = statusCode
        self.headers = headers
        self.bodyFile = bodyFile
        self.error = error
    }

    /// The first value of the header `name` (compared without regard to case), or `nil`.
    public func header(_ name: String) -> String? {
        headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }
}

/// Runs transfers outside this process, so that they go on while the app is suspended or terminated, and
/// keeps their results until they are acknowledged.
///
/// On Apple platforms this is a background `URLSession`; tests on Linux use a service in another process.
/// The contract, which the queue's hand-off relies on:
/// - When ``hand(_:)`` returns, the service has the transfer: it runs even if this process ends right after.
/// - Every transfer handed over ends in exactly one result, which ``results()`` returns (after a restart of
///   this process too) until ``acknowledge(_:)`` is called with its id. ``running()`` names the transfer
///   from the moment ``hand(_:)`` returns until its result is there: never is it in neither. A service may
///   lose a transfer (the device restarted, the system gave up); it then neither runs it nor reports it,
///   and ``running()`` no longer names it.
/// - ``acknowledge(_:)`` of an unknown id does nothing.
public protocol BackgroundTransferService: Sendable {
    /// Hands a transfer to the service.
    func hand(_ transfer: BackgroundTransfer) async throws

    /// The ids of the transfers the service has and has not finished.
    func running() async throws -> Set<String>

    /// The results not acknowledged yet, in no particular order.
    func results() async throws -> [BackgroundTransferResult]

    /// Forgets a result and its body file, once it was adopted.
    func acknowledge(_ id: String) async throws

    /// A stream that yields when new results may be there (read them with ``results()``).
    func resultsMayHaveArrived() -> AsyncStream<Void>
}

/// A remote whose transfers can be formed ahead of time, to run in a ``BackgroundTransferService``: the
/// request that uploads a file or downloads one, complete, and afterwards what the remote holds, to confirm
/// an upload before the queue counts it done.
public protocol BackgroundTransferForming: RemoteStorageAdapter {
    /// The request that uploads the file at `fileURL` (sent whole as the body) as the attachment's content,
    /// or `nil` when this upload cannot go that way (a file larger than one request may carry, say).
    ///
    /// The request must be create-only where the remote can be (a second run of it changes nothing), and
    /// must carry what makes the server check the body (a `Content-MD5`), since nothing is hashed while a
    /// service sends it.
    ///
    /// - Throws: `integrityMismatch` when the file is not the content the attachment's `contentHash` says,
    ///   and what forming the request throws (a backend that refuses to authorise it, say).
    func backgroundUploadRequest(for attachment: Attachment, fileURL: URL) async throws -> PreparedRequest?

    /// The request that downloads the attachment's content, or `nil` when this download cannot go that way.
    func backgroundDownloadRequest(for attachment: Attachment) async throws -> PreparedRequest?

    /// What the remote holds for the attachment (its size, and the SHA-256 stored with it), or `nil` when it
    /// holds nothing.
    func storedObject(for attachment: Attachment) async throws -> RemoteObjectInfo?

    /// The largest file ``backgroundUploadRequest(for:fileURL:)`` forms a request for, when the remote knows
    /// it in advance (a remote that wraps this one then need not prepare a body for a larger file); `nil`
    /// when it does not say.
    ///
    /// The default is `nil`.
    var largestBackgroundUpload: Int64? { get }

    /// Whether this remote forms background transfers at all: `false` turns ``BackgroundTransfers`` down at
    /// ``AttachmentQueue/startSync()`` with `invalidConfiguration`, as for a remote that does not conform.
    ///
    /// The default is `true`. A remote that wraps another forms them only when the one it wraps does.
    var formsBackgroundTransfers: Bool { get }

    /// The upload of the file at `fileURL` as the service is to send it: the request, the file it sends as
    /// the body, and what the remote holds once it went through; or `nil` when this upload cannot go that way.
    ///
    /// A remote that stores something other than the file's bytes (``EncryptedRemoteStorage`` stores them
    /// encrypted) writes that body at `bodyFile`, a file the queue names in the attachments directory, and
    /// says the size and SHA-256 of what it will store; the queue keeps the body until the transfer's result
    /// is adopted, then removes it. Throwing, or returning `nil`, leaves nothing at `bodyFile`.
    ///
    /// The default forms ``backgroundUploadRequest(for:fileURL:)`` with the file itself as the body.
    func backgroundUpload(for attachment: Attachment, fileURL: URL, bodyFile: URL) async throws
        -> BackgroundUpload?

    /// The attachment's content from the body a background download fetched, written to `destination` (created
    /// or replaced), with its size and SHA-256 as ``RemoteObjectInfo/writtenSize`` and
    /// ``RemoteObjectInfo/writtenSHA256``; or `nil` when the body is the content as it is.
    ///
    /// The body file belongs to the service: it is read, never moved or changed.
    ///
    /// - Throws: `integrityMismatch` when the body is not the attachment's content (it does not decrypt, say),
    ///   `keyUnavailable` when a key it needs is not there.
    ///
    /// The default returns `nil`.
    func contentOfBackgroundDownload(_ body: URL, for attachment: Attachment, into destination: URL) async throws
        -> RemoteObjectInfo?
}

/// An upload formed to run in a ``BackgroundTransferService`` (see
/// ``BackgroundTransferForming/backgroundUpload(for:fileURL:bodyFile:)``).
public struct BackgroundUpload: Sendable, Hashable {
    /// The request to send.
    public var request: PreparedRequest
    /// The file the request sends as its body: the attachment's own file, or the `bodyFile` the queue named
    /// for one written for the transfer.
    public var bodyFile: URL
    /// The size of what the remote holds once the upload went through, when it is not the file's.
    public var storedSize: Int64?
    /// The SHA-256 (lowercase hex) of what the remote holds once the upload went through, when it is not the
    /// file's.
    public var storedSHA256: String?

    /// Creates an upload.
    public init(request: PreparedRequest, bodyFile: URL, storedSize: Int64? = nil, storedSHA256: String? = nil) {
        self.request = request
        self.bodyFile = bodyFile
        self.storedSize = storedSize
        self.storedSHA256 = storedSHA256
    }
}

extension BackgroundTransferForming {
    /// `true`.
    public var formsBackgroundTransfers: Bool { true }

    /// `nil`: not said.
    public var largestBackgroundUpload: Int64? { nil }

    /// ``backgroundUploadRequest(for:fileURL:)``, with the file itself as the body.
    public func backgroundUpload(for attachment: Attachment, fileURL: URL, bodyFile: URL) async throws
        -> BackgroundUpload?
    {
        try await backgroundUploadRequest(for: attachment, fileURL: fileURL).map {
            BackgroundUpload(request: $0, bodyFile: fileURL)
        }
    }

    /// `nil`: the body is the content.
    public func contentOfBackgroundDownload(_ body: URL, for attachment: Attachment, into destination: URL)
        async throws -> RemoteObjectInfo?
    {
        nil
    }
}
