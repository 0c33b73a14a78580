import AsyncHTTPClient
import AttachmentSync
import AttachmentSyncTesting
import Foundation
import Logging
import NIOCore
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// `PresignedRemoteStorage` (the device, holding no credentials) and `PresignedURLIssuer` (the backend) on the
/// local Ceph S3 gateway.
@Suite("Presigned remote storage on Ceph")
struct PresignedRemoteStorageTests {
    static let fiveMiB: Int64 = 5 * 1024 * 1024

    /// The backend of one test: an issuer for `users/alice/` in the test's bucket, signing uploads with the
    /// server's write-only key.
    static func issuer(_ bucket: S3TestBucket, maxObjectSize: Int64 = 64 * 1024 * 1024) throws -> PresignedURLIssuer {
        try PresignedURLIssuer(
            storage: bucket.configuration(), maxObjectSize: maxObjectSize,
            uploadCredentials: .static(
                accessKeyId: bucket.server.uploadAccessKey, secretAccessKey: bucket.server.uploadSecretKey)
        ).forUser(prefix: "users/alice/")
    }

    /// A device whose closure calls `authorize` (the backend, in-process), with 5 MiB parts.
    static func device(
        _ bucket: S3TestBucket, transport: TestTransport = .asyncHTTPClient,
        configure: (inout PresignedRemoteStorage.Configuration) -> Void = { _ in },
        authorize: @escaping @Sendable (PresignedOperation) async throws -> PresignedAuthorization
    ) throws -> PresignedRemoteStorage {
        var configuration = PresignedRemoteStorage.Configuration(authorize: authorize)
        configuration.multipartThreshold = fiveMiB
        configuration.partSize = fiveMiB
        configuration.stateDirectory = bucket.stateDirectory.appendingPathComponent("device")
        configure(&configuration)
        return try PresignedRemoteStorage(configuration: configuration, transport: transport.transport)
    }

    /// The backend's own view of alice's folder, to check what the device stored.
    static func backendView(_ bucket: S3TestBucket) throws -> S3RemoteStorage {
        try bucket.makeStorage { $0.keyPrefix = "users/alice/" }
    }

    static func attachment(_ name: String, _ content: Data? = nil) -> AttachmentSync.Attachment {
        AttachmentSync.Attachment(
            id: name, filename: name, state: .queuedUpload, mediaType: "image/jpeg",
            size: content.map { Int64($0.count) }, contentHash: content.map { FileStreaming.sha256($0) })
    }

    @Test(
        "the conformance suite passes on a device holding no credentials, multipart uploads included",
        arguments: TestTransport.allCases)
    func conforms(_ transport: TestTransport) async throws {
        try await S3TestBucket.with("presigned-conf") { admin, bucket in
            let issuer = try Self.issuer(bucket)
            let device = try Self.device(bucket, transport: transport) { try await issuer.authorize($0) }
            var options = RemoteStorageConformance.Options()
            options.requiresStoredHash = true
            options.requiresCreateOnly = true
            do {
                try await RemoteStorageConformance(adapter: device, options: options).run()
            } catch {
                try? await device.shutdown()
                throw error
            }
            try await device.shutdown()
            #expect(try await admin.listKeys().isEmpty, "the suite deletes what it uploads")
        }
    }

    @Test("a file uploaded through presigned URLs lands under the user's prefix with its SHA-256, and comes back")
    func roundTripUnderThePrefix() async throws {
        try await S3TestBucket.with("presigned-rt") { admin, bucket in
            let issuer = try Self.issuer(bucket)
            let device = try Self.device(bucket) { try await issuer.authorize($0) }
            let backend = try Self.backendView(bucket)
            try await withTemporaryDirectory { directory in
                // Given a 12 MiB file (three parts) and a small one
                let big = testBytes(count: 12 * 1024 * 1024, seed: 7)
                let small = Data("a small photo".utf8)
                let bigURL = directory.appendingPathComponent("big.jpg")
                try big.write(to: bigURL)
                let progress = LockedValue<[TransferProgress]>([])
                // When the device uploads both
                try await device.uploadFile(fileURL: bigURL, attachment: Self.attachment("big.jpg", big)) { update in
                    progress.withLock { $0.append(update) }
                }
                try await device.uploadFile(data: small, attachment: Self.attachment("small.jpg", small))
                // Then the backend finds them under alice's prefix, with their SHA-256 stored
                #expect(Set(try await admin.listKeys()) == ["users/alice/big.jpg", "users/alice/small.jpg"])
                let info = try await backend.fileInfo(attachment: Self.attachment("big.jpg"))
                #expect(info?.sha256 == FileStreaming.sha256(big))
                #expect(progress.withLock { $0.last?.completedBytes } == Int64(big.count))
                #expect(progress.withLock { $0.allSatisfy { $0.completedBytes <= Int64(big.count) } })
                // And the device downloads them back, streaming
                let destination = directory.appendingPathComponent("back.jpg")
                let object = try await device.downloadFile(
                    attachment: Self.attachment("big.jpg", big), into: destination, from: 0, progress: { _ in })
                #expect(try Data(contentsOf: destination) == big)
                #expect(object.sha256 == FileStreaming.sha256(big))
                #expect(try await device.downloadFile(attachment: Self.attachment("small.jpg")) == small)
            }
            try await backend.shutdown()
            try await device.shutdown()
        }
    }

    @Test("a part whose URL the server finds expired is authorised again and the multipart upload completes")
    func expiredURLMidMultipartIsRenewed() async throws {
        try await S3TestBucket.with("presigned-exp") { admin, bucket in
            var issuer = try Self.issuer(bucket)
            // URLs signed two hours ago: the server refuses them, though their expiry claims an hour left.
            var stale = issuer
            stale.now = { Date().addingTimeInterval(-7200) }
            issuer.now = { Date() }
            let asked = LockedValue<[PresignedOperation]>([])
            let device = try Self.device(bucket) { [issuer, stale] operation in
                let earlier = asked.withLock { asked -> Int in
                    defer { asked.append(operation) }
                    return asked.filter { $0 == operation }.count
                }
                if operation.kind == .uploadPart, operation.partNumber == 2, earlier == 0 {
                    var authorization = try await stale.authorize(operation)
                    authorization.expiresAt = Date().addingTimeInterval(3600)
                    return authorization
                }
                return try await issuer.authorize(operation)
            }
            try await withTemporaryDirectory { directory in
                let content = testBytes(count: 11 * 1024 * 1024, seed: 3)
                let url = directory.appendingPathComponent("long.mov")
                try content.write(to: url)
                let progress = LockedValue<Int64>(0)
                try await device.uploadFile(fileURL: url, attachment: Self.attachment("long.mov", content)) { update in
                    progress.withLock { $0 = max($0, update.completedBytes) }
                }
                let backend = try Self.backendView(bucket)
                #expect(try await backend.downloadFile(attachment: Self.attachment("long.mov")) == content)
                try await backend.shutdown()
                // Part 2 was asked for again after the refusal; progress never counted it twice.
                let parts = asked.withLock { $0.filter { $0.kind == .uploadPart }.compactMap(\.partNumber) }
                #expect(parts.sorted() == [1, 2, 2, 3])
                #expect(progress.withLock { $0 } == Int64(content.count))
                #expect(try await admin.listMultipartUploadIds().isEmpty)
            }
            try await device.shutdown()
        }
    }

    @Test("an authorisation is reused until the renewal margin before it expires, then asked for again")
    func authorisationsAreCachedUntilNearExpiry() async throws {
        try await S3TestBucket.with("presigned-cache") { _, bucket in
            let issuer = try Self.issuer(bucket)
            // The device's clock runs `offset` seconds ahead of the backend's (the real one), so how long the
            // test itself takes does not matter.
            let offset = LockedValue<TimeInterval>(0)
            let device = try Self.device(
                bucket, configure: { $0.now = { Date().addingTimeInterval(offset.withLock { $0 }) } }
            ) {
                try await issuer.authorize($0)
            }
            try await device.uploadFile(data: Data("x".utf8), attachment: Self.attachment("x.jpg"))
            let afterUpload = await device.authorizationCalls
            for _ in 0..<3 {
                _ = try await device.downloadFile(attachment: Self.attachment("x.jpg"))
            }
            #expect(await device.authorizationCalls == afterUpload + 1, "three downloads share one authorisation")
            // 15-minute URLs, a 60-second margin: at 14 minutes the next download asks again.
            offset.withLock { $0 = 14 * 60 }
            _ = try await device.downloadFile(attachment: Self.attachment("x.jpg"))
            #expect(await device.authorizationCalls == afterUpload + 2)
            try await device.shutdown()
        }
    }

    @Test("a backend that refuses gives accessDenied at once, asked once per request; the queue does not storm it")
    func refusalIsAccessDeniedWithoutRetryStorm() async throws {
        try await S3TestBucket.with("presigned-deny") { admin, bucket in
            let calls = LockedValue(0)
            let device = try Self.device(bucket) { _ in
                calls.withLock { $0 += 1 }
                throw PresignedRemoteStorage.Denied("alice is over her storage quota")
            }
            try await withTemporaryDirectory { directory in
                // One request, one question, a typed error with the backend's reason
                let error = await #expect(throws: AttachmentError.self) {
                    try await device.uploadFile(data: Data("photo".utf8), attachment: Self.attachment("p.jpg"))
                }
                #expect(error?.code == .accessDenied)
                #expect(error?.message.contains("over her storage quota") == true)
                #expect(calls.withLock { $0 } == 1)
                // A large file: refused at the start of its multipart upload, not once per part
                let big = testBytes(count: 11 * 1024 * 1024, seed: 5)
                let url = directory.appendingPathComponent("big.jpg")
                try big.write(to: url)
                calls.withLock { $0 = 0 }
                await #expect(throws: AttachmentError.self) {
                    try await device.uploadFile(fileURL: url, attachment: Self.attachment("big.jpg", big)) { _ in }
                }
                #expect(calls.withLock { $0 } <= 2, "a HEAD (create-only) and the start, nothing per part")

                // Through the queue: each attempt asks once, and the upload is given up after maxAttempts
                // with the file kept.
                calls.withLock { $0 = 0 }
                let attempts = try await S3QueueDevice.with(
                    folder: directory.appendingPathComponent("app"), storage: device,
                    configure: { $0.maxAttempts = 3 }
                ) { app in
                    let events = app.queue.events
                    try await app.queue.startSync()
                    let saved = try await app.queue.saveFile(
                        data: Data("kept".utf8), mediaType: "image/jpeg", fileExtension: "jpg"
                    ) { tx, a in
                        _ = try tx.execute(
                            sql: "INSERT INTO checklists (id, photo_id) VALUES ('c', ?)", arguments: [a.id])
                    }
                    let gaveUp = try await withDeadline(seconds: 60, "the upload to be given up") { () -> Int in
                        for await event in events {
                            if case .gaveUp(let id, let error, let attempts) = event, id == saved.id {
                                #expect(error.code == .accessDenied)
                                return attempts
                            }
                        }
                        throw StreamEnded(what: "events")
                    }
                    #expect(app.bytesOnDisk(saved.filename) == Data("kept".utf8))
                    return gaveUp
                }
                #expect(attempts == 3)
                #expect(calls.withLock { $0 } == attempts, "one question to the backend per attempt")
            }
            #expect(try await admin.listKeys().isEmpty)
            try await device.shutdown()
        }
    }

    @Test("the backend's limits hold against a device that lies: size, create-only, prefix")
    func issuerLimitsAreEnforcedByTheServer() async throws {
        try await S3TestBucket.with("presigned-limits") { admin, bucket in
            let issuer = try Self.issuer(bucket, maxObjectSize: 1000)
            let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup)
            func send(_ authorization: PresignedAuthorization, body: Data) async throws -> Int {
                var request = HTTPClientRequest(url: authorization.url.absoluteString)
                request.method = .PUT
                for (name, value) in authorization.headers where name != "content-length" {
                    request.headers.add(name: name, value: value)
                }
                request.body = .bytes(ByteBuffer(bytes: body))
                let response = try await client.execute(request, timeout: .seconds(30))
                _ = try await response.body.collect(upTo: 1 << 20)
                return Int(response.status.code)
            }
            do {
                // Over the size limit: refused by the backend, naming the value
                var put = PresignedOperation(kind: .put, filename: "a.jpg")
                put.contentLength = 1001
                let tooBig = await #expect(throws: AttachmentError.self) { try await issuer.authorize(put) }
                #expect(tooBig?.code == .accessDenied)
                #expect(tooBig?.message.contains("1001") == true)
                // A URL for 10 bytes does not take 20: the server checks the signed length
                put.contentLength = 10
                let authorization = try await issuer.authorize(put)
                #expect(try await send(authorization, body: Data(count: 20)) == 403)
                #expect(try await admin.listKeys().isEmpty)
                // Create-only even when the device asks otherwise: a second upload cannot replace the first
                put.createOnly = false
                let replace = try await issuer.authorize(put)
                #expect(try await send(replace, body: Data(repeating: 1, count: 10)) == 200)
                #expect(try await send(replace, body: Data(repeating: 2, count: 10)) == 412)
                let backend = try Self.backendView(bucket)
                #expect(
                    try await backend.downloadFile(attachment: Self.attachment("a.jpg"))
                        == Data(repeating: 1, count: 10))
                try await backend.shutdown()
                // No way out of the prefix
                for name in ["../bob/a.jpg", "a/b.jpg", "..", "", "a\u{0}.jpg", "a\\b.jpg"] {
                    let escape = await #expect(throws: AttachmentError.self) {
                        try await issuer.authorize(PresignedOperation(kind: .get, filename: name))
                    }
                    #expect(escape?.code == .invalidName, "\(String(reflecting: name))")
                }
                // A device over the limit gets accessDenied and stores nothing
                let device = try Self.device(bucket) { try await issuer.authorize($0) }
                let refused = await #expect(throws: AttachmentError.self) {
                    try await device.uploadFile(data: Data(count: 2000), attachment: Self.attachment("big.jpg"))
                }
                #expect(refused?.code == .accessDenied)
                try await device.shutdown()
                #expect(try await admin.listKeys() == ["users/alice/a.jpg"])
            } catch {
                try? await client.shutdown()
                throw error
            }
            try await client.shutdown()
        }
    }

    @Test("an interrupted multipart upload resumes on a new adapter, listing its parts through presigned URLs")
    func multipartResumesAcrossRestarts() async throws {
        try await S3TestBucket.with("presigned-resume") { admin, bucket in
            let issuer = try Self.issuer(bucket)
            let asked = LockedValue<[PresignedOperation]>([])
            let authorize: @Sendable (PresignedOperation) async throws -> PresignedAuthorization = { operation in
                asked.withLock { $0.append(operation) }
                return try await issuer.authorize(operation)
            }
            try await withTemporaryDirectory { directory in
                let content = testBytes(count: 16 * 1024 * 1024, seed: 9)
                let url = directory.appendingPathComponent("clip.mov")
                try content.write(to: url)
                let attachment = Self.attachment("clip.mov", content)
                // Given an upload whose third part fails as the network drops
                let first = try Self.device(
                    bucket,
                    configure: {
                        $0.partConcurrency = 1
                        $0.requestObserver = { event in
                            if event.partNumber == 3 {
                                throw AttachmentError(code: .remoteUnavailable, message: "network gone")
                            }
                        }
                    }, authorize: authorize)
                await #expect(throws: AttachmentError.self) {
                    try await first.uploadFile(fileURL: url, attachment: attachment) { _ in }
                }
                try await first.shutdown()
                #expect(try await admin.listMultipartUploadIds().count == 1)
                // When a new adapter (the app restarted) uploads the file again
                asked.withLock { $0 = [] }
                let second = try Self.device(bucket, authorize: authorize)
                try await second.uploadFile(fileURL: url, attachment: attachment) { _ in }
                try await second.shutdown()
                // Then it listed the parts, sent only the missing ones, and the object is whole
                let kinds = asked.withLock { $0.map(\.kind) }
                #expect(kinds.first == .listParts)
                #expect(
                    asked.withLock { $0.filter { $0.kind == .uploadPart }.compactMap(\.partNumber).sorted() } == [3, 4])
                let backend = try Self.backendView(bucket)
                #expect(try await backend.downloadFile(attachment: Self.attachment("clip.mov")) == content)
                try await backend.shutdown()
                #expect(try await admin.listMultipartUploadIds().isEmpty)
            }
        }
    }

    @Test("no log line, error or description shows a presigned URL's query")
    func urlsNeverLeak() async throws {
        try await S3TestBucket.with("presigned-leak") { _, bucket in
            let issuer = try Self.issuer(bucket)
            let lines = LockedValue<[String]>([])
            let seen = LockedValue<[PresignedAuthorization]>([])
            var stale = issuer
            stale.now = { Date().addingTimeInterval(-7200) }
            let device = try Self.device(
                bucket,
                configure: { configuration in
                    var logger = Logger(label: "test") { _ in CapturingLogHandler(lines: lines) }
                    logger.logLevel = .trace
                    configuration.logger = logger
                }
            ) { [stale] operation in
                // The first authorisation for each object is stale: its first request goes through a refusal.
                let first = seen.withLock { seen in !seen.contains { $0.url.path == issuer.path(of: operation) } }
                var authorization = try await (first ? stale : issuer).authorize(operation)
                authorization.expiresAt = Date().addingTimeInterval(3600)
                seen.withLock { $0.append(authorization) }
                return authorization
            }
            try await device.uploadFile(data: Data("secret photo".utf8), attachment: Self.attachment("s.jpg"))
            _ = try await device.downloadFile(attachment: Self.attachment("s.jpg"))
            let missing = await #expect(throws: AttachmentError.self) {
                try await device.downloadFile(attachment: Self.attachment("none.jpg"))
            }
            #expect(missing?.code == .remoteNotFound)
            try await device.shutdown()
            let signatures = seen.withLock {
                $0.compactMap {
                    URLComponents(url: $0.url, resolvingAgainstBaseURL: false)?.queryItems?.first {
                        $0.name == "X-Amz-Signature"
                    }?.value
                }
            }
            #expect(signatures.count >= 4)
            let texts =
                lines.withLock { $0 } + [String(describing: missing as Any)] + seen.withLock { $0.map(\.description) }
            #expect(lines.withLock { !$0.isEmpty }, "the device logged its requests")
            for text in texts {
                #expect(!text.contains("X-Amz-"), "\(text)")
                for signature in signatures {
                    #expect(!text.contains(signature))
                }
            }
        }
    }
}

extension PresignedURLIssuer {
    /// The URL path an operation's object has (for telling operations on one object apart in tests).
    func path(of operation: PresignedOperation) -> String {
        storage.target(key: storage.keyPrefix + operation.filename).path
    }
}
