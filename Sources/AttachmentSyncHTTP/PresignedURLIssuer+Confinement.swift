import AttachmentSync
import Crypto
import Foundation

extension PresignedOperation.Kind {
    /// Whether the request writes (signed with ``PresignedURLIssuer/uploadCredentials``).
    var isUpload: Bool {
        switch self {
        case .put, .createMultipartUpload, .uploadPart, .completeMultipartUpload, .abortMultipartUpload: true
        case .get, .head, .delete, .listParts: false
        }
    }
}

/// What the issuer sends to the server itself: `HEAD`s before multipart uploads, and the confinement check.
/// One HTTP engine for the issuer and the copies ``PresignedURLIssuer/forUser(prefix:)`` makes, created at
/// the first request.
final class IssuerServer: Sendable {
    let confinement = ConfinementVerdict()
    private let storage: S3RemoteStorage.Configuration
    private let uploadCredentials: S3RemoteStorage.CredentialsProvider
    private let transport: RemoteTransport
    private let adapters = LockedValue<Adapters?>(nil)

    /// Two adapters on one engine, for the whole bucket (no key prefix): one with the storage credentials,
    /// one with the upload credentials.
    struct Adapters: Sendable {
        let engine: any HTTPEngine
        let reader: S3RemoteStorage
        let uploader: S3RemoteStorage
    }

    init(
        storage: S3RemoteStorage.Configuration, uploadCredentials: S3RemoteStorage.CredentialsProvider,
        transport: RemoteTransport
    ) {
        self.transport = transport
        var storage = storage
        storage.keyPrefix = ""
        storage.requestObserver = nil
        self.storage = storage
        self.uploadCredentials = uploadCredentials
    }

    /// The adapters, created at the first call.
    func current() throws -> Adapters {
        try adapters.withLock { adapters in
            if let adapters { return adapters }
            let engine = transport.makeEngine(storage.connectTimeout, storage.requestTimeout)
            var upload = storage
            upload.credentials = uploadCredentials
            let borrowed = BorrowedEngine(base: engine)
            let created = Adapters(
                engine: engine,
                reader: try S3RemoteStorage(
                    configuration: storage, engine: { borrowed },
                    authorizer: SigV4RequestAuthorizer(configuration: storage)),
                uploader: try S3RemoteStorage(
                    configuration: upload, engine: { borrowed },
                    authorizer: SigV4RequestAuthorizer(configuration: upload)))
            adapters = created
            return created
        }
    }

    /// The object stored under `key` (a `HEAD` with the storage credentials), or `nil`.
    func existingObject(key: String) async throws -> RemoteObjectInfo? {
        try await current().reader.fileInfo(attachment: Self.attachment(key))
    }

    /// An attachment record that addresses `key` in adapters without a key prefix.
    static func attachment(_ key: String) -> Attachment {
        Attachment(id: key, filename: key, state: .synced)
    }

    func shutdown() async throws {
        let engine = adapters.withLock { adapters -> (any HTTPEngine)? in
            defer { adapters = nil }
            return adapters?.engine
        }
        try await engine?.shutdown()
    }

    /// An issuer dropped without ``PresignedURLIssuer/shutdown()`` shuts its engine down in the background.
    deinit {
        adapters.withLock { $0?.engine }?.shutdownInBackground()
    }
}

/// The confinement check's verdict, shared by an issuer and its copies: found once, kept; a failure is kept
/// for a minute, then the check runs again. Concurrent callers share one check.
actor ConfinementVerdict {
    private var confined = false
    private var refusal: (error: AttachmentError, at: ContinuousClock.Instant)?
    private var running: Task<AttachmentError?, any Error>?

    /// Returns once uploads are confined; throws the refusal otherwise.
    func require(_ check: @escaping @Sendable () async throws -> AttachmentError?) async throws {
        if confined { return }
        if let refusal, ContinuousClock.now - refusal.at < .seconds(60) { throw refusal.error }
        let task: Task<AttachmentError?, any Error>
        if let running {
            task = running
        } else {
            task = Task { try await check() }
            running = task
        }
        defer { running = nil }
        if let error = try await task.value {
            refusal = (error, .now)
            throw error
        }
        confined = true
        refusal = nil
    }
}

extension PresignedURLIssuer {
    /// What a hostile device could do with an upload URL of this issuer plus headers it adds unsigned, tried on
    /// the server: copy another object in (`x-amz-copy-source`, alone or with a range, into a single upload or a
    /// part), or make its object public (`x-amz-acl`, `x-amz-grant-read`, on a single upload or a multipart
    /// one). Returns `nil` when none of it worked, else the refusal to throw for every upload.
    ///
    /// - Throws: `remoteUnavailable` or what the server answered when the check could not be done.
    func probeConfinement() async throws -> AttachmentError? {
        let adapters = try server.current()
        let base = storage.keyPrefix + ".attachment-sync-probe-\(UUID().uuidString.lowercased())"
        let sourceKey = base + "-source"
        let source = Data("attachment-sync confinement check: this object must never be copied".utf8)
        var keys = [sourceKey]
        var uploadIds: [(key: String, id: String)] = []
        var found: [String] = []
        do {
            // The object to copy: written with the upload credentials, as every device upload is.
            let digests = PayloadDigests.of(source)
            var put = S3Request(
                method: .put, key: sourceKey,
                headers: [("content-md5", digests.md5)] + (cannedACL.map { [("x-amz-acl", $0)] } ?? []),
                body: .data(source), payload: .sha256(digests.sha256), operation: "PutObject")
            put.headers.append(("if-none-match", "*"))
            let response = try await adapters.uploader.send(put, attachmentId: nil)
            _ = try await response.body.collect(upTo: HTTPTransport.maxErrorBody)

            let copySource = ("x-amz-copy-source", "/" + storage.bucket + "/" + Self.encodeCopySource(sourceKey))
            let range = ("x-amz-copy-source-range", "bytes=0-\(source.count - 1)")
            let attempts: [(name: String, length: Int, extra: [(String, String)])] = [
                ("copy", source.count, [copySource]),
                ("copy0", 0, [copySource]),
                ("range0", 0, [copySource, range]),
            ]
            for attempt in attempts {
                let key = "\(base)-\(attempt.name)"
                keys.append(key)
                _ = try await sendPut(key: key, length: attempt.length, extra: attempt.extra, adapters: adapters)
                if try await adapters.reader.fileInfo(attachment: IssuerServer.attachment(key)) != nil,
                    try await adapters.reader.downloadFile(attachment: IssuerServer.attachment(key)) == source
                {
                    found.append("copies another object in through an unsigned \(attempt.extra.map(\.0))")
                }
            }
            // A part copied in (servers that accept a body beside the copy source).
            let partKey = base + "-part"
            if let uploadId = try await createUpload(key: partKey, extra: [], adapters: adapters) {
                uploadIds.append((partKey, uploadId))
                var part = PresignedOperation(kind: .uploadPart, filename: "")
                part.uploadId = uploadId
                part.partNumber = 1
                part.contentLength = Int64(source.count)
                let authorization = try await presignUpload(
                    part, key: partKey, method: "PUT",
                    query: [("partNumber", "1"), ("uploadId", uploadId)])
                let reply = try await send(
                    .put, authorization, body: Data(repeating: 0x2E, count: source.count),
                    extra: [copySource, range], adapters: adapters)
                let etag = S3XML.parse(reply.body)?.value("ETag") ?? reply.headers.first(name: "etag") ?? ""
                if (200..<300).contains(reply.status.code),
                    etag.trimmingCharacters(in: CharacterSet(charactersIn: "\"")) == Self.md5Hex(source)
                {
                    found.append("copies another object into a part through an unsigned x-amz-copy-source")
                }
            }
            // Made public: the grant headers, and an ACL header before or after the signed one.
            let allUsers = "uri=\"http://acs.amazonaws.com/groups/global/AllUsers\""
            let publicAttempts: [(name: String, extra: [(String, String)], first: Bool)] = [
                ("acl", [("x-amz-acl", "public-read")], false),
                ("acl-first", [("x-amz-acl", "public-read")], true),
                ("grant", [("x-amz-grant-read", allUsers)], false),
            ]
            for attempt in publicAttempts {
                let key = "\(base)-\(attempt.name)"
                keys.append(key)
                _ = try await sendPut(
                    key: key, length: source.count, extra: attempt.extra, first: attempt.first, adapters: adapters)
                if try await readableByAnyone(key, adapters: adapters) {
                    found.append("makes its object public through an unsigned \(attempt.extra.map(\.0))")
                }
            }
            for first in [false, true] {
                let key = base + (first ? "-multipart-acl-first" : "-multipart-acl")
                guard
                    let uploadId = try await createUpload(
                        key: key, extra: [("x-amz-acl", "public-read")], first: first, adapters: adapters)
                else { continue }
                uploadIds.append((key, uploadId))
                if try await completeOnePart(key: key, uploadId: uploadId, body: source, adapters: adapters) {
                    keys.append(key)
                    if try await readableByAnyone(key, adapters: adapters) {
                        found.append("makes a multipart upload public through an unsigned x-amz-acl")
                    }
                }
            }
        } catch {
            await cleanUpProbe(keys: keys, uploads: uploadIds, adapters: adapters)
            throw AttachmentError(
                code: (error as? AttachmentError)?.code == .remoteUnavailable
                    ? .remoteUnavailable : .invalidConfiguration,
                message: "could not check that upload URLs stay confined to their prefix (writing, reading and "
                    + "deleting probe objects under \(String(reflecting: storage.keyPrefix))); no upload is "
                    + "authorised until it can", name: "uploadCredentials", underlying: error)
        }
        await cleanUpProbe(keys: keys, uploads: uploadIds, adapters: adapters)
        guard !found.isEmpty else { return nil }
        return AttachmentError(
            code: .invalidConfiguration,
            message: "no upload is authorised: on this server an upload URL signed with these upload credentials "
                + found.joined(separator: "; ") + ". Sign uploads with credentials that can create objects but "
                + "read none (uploadCredentials: on Ceph a subuser with --access write)"
                + (cannedACL == nil ? " and set cannedACL" : ""), name: "uploadCredentials")
    }

    /// A single upload URL for `key` as ``authorize(_:)`` signs one for a device asking nothing optional,
    /// sent with the device's `extra` headers after (or before) the signed ones.
    private func sendPut(
        key: String, length: Int, extra: [(String, String)], first: Bool = false, adapters: IssuerServer.Adapters
    ) async throws -> (status: HTTPStatus, headers: HTTPHeaderFields, body: Data) {
        var operation = PresignedOperation(kind: .put, filename: "")
        operation.contentLength = Int64(length)
        let authorization = try await presignUpload(operation, key: key, method: "PUT", query: [])
        return try await send(
            .put, authorization, body: Data(repeating: 0x2E, count: length), extra: extra, first: first,
            adapters: adapters)
    }

    /// Starts a multipart upload of `key` through an upload URL with `extra` headers; its id, or `nil` when the
    /// server refused.
    private func createUpload(
        key: String, extra: [(String, String)], first: Bool = false, adapters: IssuerServer.Adapters
    ) async throws -> String? {
        var operation = PresignedOperation(kind: .createMultipartUpload, filename: "")
        operation.objectSize = 1
        let authorization = try await presignUpload(operation, key: key, method: "POST", query: [("uploads", "")])
        let reply = try await send(.post, authorization, extra: extra, first: first, adapters: adapters)
        guard (200..<300).contains(reply.status.code) else { return nil }
        return S3XML.parse(reply.body)?.value("UploadId")
    }

    /// Uploads `body` as the only part of `uploadId` and completes it; whether it completed.
    private func completeOnePart(
        key: String, uploadId: String, body: Data, adapters: IssuerServer.Adapters
    ) async throws -> Bool {
        var part = PresignedOperation(kind: .uploadPart, filename: "")
        part.uploadId = uploadId
        part.partNumber = 1
        part.contentLength = Int64(body.count)
        let partURL = try await presignUpload(
            part, key: key, method: "PUT", query: [("partNumber", "1"), ("uploadId", uploadId)])
        let sent = try await send(.put, partURL, body: body, adapters: adapters)
        guard (200..<300).contains(sent.status.code), let etag = sent.headers.first(name: "etag") else { return false }
        let complete = try await presignUpload(
            PresignedOperation(kind: .completeMultipartUpload, filename: ""), key: key, method: "POST",
            query: [("uploadId", uploadId)])
        let xml =
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\(S3XML.escape(etag))</ETag></Part>"
            + "</CompleteMultipartUpload>"
        let reply = try await send(.post, complete, body: Data(xml.utf8), adapters: adapters)
        return (200..<300).contains(reply.status.code) && S3XML.parse(reply.body)?.name != "Error"
    }

    /// The URL and headers ``authorize(_:)`` gives for `operation` on `key`, without its checks against the
    /// server.
    private func presignUpload(
        _ operation: PresignedOperation, key: String, method: String, query: [(name: String, value: String)]
    ) async throws -> PresignedAuthorization {
        var operation = operation
        operation.filename = "probe"
        var issuer = self
        issuer.allowedOperations = Set(PresignedOperation.Kind.allCases)
        issuer.maxObjectSize = Self.largestObjectSize
        operation.uploadId = operation.uploadId ?? query.first { $0.name == "uploadId" }?.value
        let signed = try issuer.check(operation)
        return try await presign(
            method: method, key: key, query: signed.query, headers: signed.headers,
            credentials: uploadCredentialsCache, lifetime: .seconds(300))
    }

    /// Sends `authorization` as a device would, with `extra` unsigned headers after (or before) its own.
    private func send(
        _ method: HTTPRequestMethod, _ authorization: PresignedAuthorization, body: Data = Data(),
        extra: [(String, String)] = [], first: Bool = false, adapters: IssuerServer.Adapters
    ) async throws -> (status: HTTPStatus, headers: HTTPHeaderFields, body: Data) {
        var headers = authorization.headers.sorted { $0.key < $1.key }.filter { $0.key != "content-length" }
            .map { (name: $0.key, value: $0.value) }
        let unsigned = extra.map { (name: $0.0, value: $0.1) }
        headers = first ? unsigned + headers : headers + unsigned
        let response = try await adapters.engine.execute(
            HTTPEngineRequest(
                method: method, url: authorization.url.absoluteString, headers: HTTPHeaderFields(headers),
                body: .bytes(body)))
        let reply = try await response.body.collect(upTo: 1 << 20)
        return (response.status, response.headers, reply)
    }

    /// Whether a `GET` without credentials returns the object.
    private func readableByAnyone(_ key: String, adapters: IssuerServer.Adapters) async throws -> Bool {
        let target = storage.target(key: key)
        let path = SigV4Signer.uriEncode(target.path, keepingSlashes: true)
        let response = try await adapters.engine.execute(
            HTTPEngineRequest(method: .get, url: "\(target.scheme)://\(target.host)\(path)"))
        _ = try await response.body.collect(upTo: 1 << 20)
        return response.status == .ok
    }

    /// Deletes the probe's objects and aborts its uploads, ignoring failures (they are small and named).
    private func cleanUpProbe(
        keys: [String], uploads: [(key: String, id: String)], adapters: IssuerServer.Adapters
    ) async {
        for key in keys {
            try? await adapters.reader.deleteFile(attachment: IssuerServer.attachment(key))
        }
        for upload in uploads {
            await adapters.uploader.abortQuietly(key: upload.key, uploadId: upload.id)
        }
    }

    /// A key as `x-amz-copy-source` takes it: percent-encoded, `/` kept.
    static func encodeCopySource(_ key: String) -> String {
        SigV4Signer.uriEncode(key, keepingSlashes: true)
    }

    static func md5Hex(_ data: Data) -> String {
        Insecure.MD5.hash(data: data).map { String(format: "%02x", $0) }.joined()
    }
}

/// An engine another owner shuts down: the issuer's two adapters share its engine, which their own
/// `shutdown()` (or release) must leave running.
private struct BorrowedEngine: HTTPEngine {
    let base: any HTTPEngine

    func execute(_ request: HTTPEngineRequest) async throws -> HTTPEngineResponse {
        try await base.execute(request)
    }

    func shutdown() async throws {}

    func shutdownInBackground() {}
}
