import AsyncHTTPClient
import AttachmentSync
import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// A hostile device against `PresignedURLIssuer` on the local Ceph gateway: it holds the authorisations the
/// backend gave it and adds any header it likes. Ceph 16 acts on unsigned `x-amz-` headers of presigned
/// requests (AWS refuses them), so what keeps the device in its prefix is what the issuer signs and with
/// which credentials.
@Suite("Presigned uploads stay in their prefix on Ceph")
struct PresignedConfinementTests {
    static let allUsers = "uri=\"http://acs.amazonaws.com/groups/global/AllUsers\""

    /// Bob's object, which alice's device must never get into its own prefix.
    static let secretKey = "users/bob/secret.jpg"

    /// One attack: what the device asks the backend for, and the headers it adds to each request.
    struct Attack: Sendable, CustomStringConvertible {
        var description: String
        /// The key it tries to fill (under users/alice/).
        var filename: String
        /// Runs the attack with `device`; returns normally whether or not the server took it.
        var run: @Sendable (HostileDevice, String) async throws -> Void
    }

    /// A device that sends what it likes with the authorisations the issuer gives it.
    struct HostileDevice: Sendable {
        let issuer: PresignedURLIssuer
        let client: HTTPClient
        let bucket: String

        /// The authorisation for `operation`, or `nil` when the backend refused it (the attack stops there).
        func authorize(_ operation: PresignedOperation) async throws -> PresignedAuthorization? {
            do {
                return try await issuer.authorize(operation)
            } catch let error as AttachmentError
                where [.accessDenied, .invalidConfiguration].contains(error.code)
            {
                return nil
            }
        }

        /// Sends `method` to the authorisation's URL with its headers, plus `extra` before or after them.
        func send(
            _ method: HTTPMethod, _ authorization: PresignedAuthorization, body: Data = Data(),
            extra: [(String, String)] = [], extraFirst: Bool = false
        ) async throws -> (status: UInt, headers: HTTPHeaders, body: Data) {
            var request = HTTPClientRequest(url: authorization.url.absoluteString)
            request.method = method
            if extraFirst {
                for (name, value) in extra { request.headers.add(name: name, value: value) }
            }
            for (name, value) in authorization.headers.sorted(by: { $0.key < $1.key }) where name != "content-length" {
                request.headers.add(name: name, value: value)
            }
            if !extraFirst {
                for (name, value) in extra { request.headers.add(name: name, value: value) }
            }
            request.body = .bytes(ByteBuffer(bytes: body))
            let response = try await client.execute(request, timeout: .seconds(30))
            let bytes = try await response.body.collect(upTo: 1 << 20)
            return (response.status.code, response.headers, Data(bytes.readableBytesView))
        }

        /// An unsigned `x-amz-copy-source` naming bob's object.
        var copySource: (String, String) { ("x-amz-copy-source", "/\(bucket)/\(PresignedConfinementTests.secretKey)") }
    }

    static func put(_ filename: String, length: Int) -> PresignedOperation {
        var operation = PresignedOperation(kind: .put, filename: filename)
        operation.contentLength = Int64(length)
        return operation
    }

    /// Every way found to copy bob's object in, or to make alice's object readable by others, with headers
    /// the issuer did not sign.
    static func attacks(secret: Data) -> [Attack] {
        let length = secret.count
        let filler = Data(repeating: 0x2E, count: length)
        return [
            Attack(description: "PUT + x-amz-copy-source (CopyObject)", filename: "copy.jpg") { device, name in
                guard let put = try await device.authorize(put(name, length: length)) else { return }
                _ = try await device.send(.PUT, put, body: filler, extra: [device.copySource])
            },
            Attack(description: "empty PUT + x-amz-copy-source (CopyObject)", filename: "copy0.jpg") {
                device, name in
                guard let put = try await device.authorize(put(name, length: 0)) else { return }
                _ = try await device.send(.PUT, put, extra: [device.copySource])
            },
            // Ceph copies through a PUT with a copy source and a range only when the body is empty.
            Attack(description: "empty PUT + x-amz-copy-source + x-amz-copy-source-range", filename: "range.jpg") {
                device, name in
                guard let put = try await device.authorize(put(name, length: 0)) else { return }
                _ = try await device.send(
                    .PUT, put, extra: [device.copySource, ("x-amz-copy-source-range", "bytes=0-\(length - 1)")])
            },
            Attack(description: "UploadPart + x-amz-copy-source (UploadPartCopy), then complete", filename: "part.jpg")
            {
                device, name in
                var create = PresignedOperation(kind: .createMultipartUpload, filename: name)
                create.objectSize = Int64(length)
                guard let created = try await device.authorize(create) else { return }
                let reply = try await device.send(.POST, created)
                guard reply.status == 200, let uploadId = S3XML.parse(reply.body)?.value("UploadId") else { return }
                var part = PresignedOperation(kind: .uploadPart, filename: name)
                part.uploadId = uploadId
                part.partNumber = 1
                part.contentLength = Int64(length)
                guard let partURL = try await device.authorize(part) else { return }
                let copied = try await device.send(
                    .PUT, partURL, body: filler,
                    extra: [device.copySource, ("x-amz-copy-source-range", "bytes=0-\(length - 1)")])
                guard copied.status == 200,
                    let etag = S3XML.parse(copied.body)?.value("ETag") ?? copied.headers.first(name: "etag")
                else { return }
                var complete = PresignedOperation(kind: .completeMultipartUpload, filename: name)
                complete.uploadId = uploadId
                guard let completion = try await device.authorize(complete) else { return }
                let xml =
                    "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\(S3XML.escape(etag))</ETag>"
                    + "</Part></CompleteMultipartUpload>"
                _ = try await device.send(.POST, completion, body: Data(xml.utf8))
            },
            Attack(description: "PUT + x-amz-acl: public-read", filename: "public.jpg") { device, name in
                guard let put = try await device.authorize(put(name, length: 4)) else { return }
                _ = try await device.send(.PUT, put, body: Data("mine".utf8), extra: [("x-amz-acl", "public-read")])
            },
            Attack(description: "PUT + x-amz-acl: public-read before the signed headers", filename: "public2.jpg") {
                device, name in
                guard let put = try await device.authorize(put(name, length: 4)) else { return }
                _ = try await device.send(
                    .PUT, put, body: Data("mine".utf8), extra: [("x-amz-acl", "public-read")], extraFirst: true)
            },
            Attack(description: "PUT + x-amz-grant-read: AllUsers", filename: "grant.jpg") { device, name in
                guard let put = try await device.authorize(put(name, length: 4)) else { return }
                _ = try await device.send(.PUT, put, body: Data("mine".utf8), extra: [("x-amz-grant-read", allUsers)])
            },
            Attack(description: "CreateMultipartUpload + x-amz-acl: public-read, then complete", filename: "mp.jpg") {
                device, name in
                var create = PresignedOperation(kind: .createMultipartUpload, filename: name)
                create.objectSize = 4
                guard let created = try await device.authorize(create) else { return }
                let reply = try await device.send(.POST, created, extra: [("x-amz-acl", "public-read")])
                guard reply.status == 200, let uploadId = S3XML.parse(reply.body)?.value("UploadId") else { return }
                var part = PresignedOperation(kind: .uploadPart, filename: name)
                part.uploadId = uploadId
                part.partNumber = 1
                part.contentLength = 4
                guard let partURL = try await device.authorize(part) else { return }
                let sent = try await device.send(.PUT, partURL, body: Data("mine".utf8))
                guard sent.status == 200, let etag = sent.headers.first(name: "etag") else { return }
                var complete = PresignedOperation(kind: .completeMultipartUpload, filename: name)
                complete.uploadId = uploadId
                guard let completion = try await device.authorize(complete) else { return }
                let xml =
                    "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\(S3XML.escape(etag))</ETag>"
                    + "</Part></CompleteMultipartUpload>"
                _ = try await device.send(.POST, completion, body: Data(xml.utf8))
            },
        ]
    }

    /// Runs every attack with `issuer` and checks that alice's prefix holds no copy of bob's object and nothing
    /// anyone can read without credentials.
    static func checkAttacks(
        _ issuer: PresignedURLIssuer, bucket: S3TestBucket, admin: S3RemoteStorage, label: String
    ) async throws {
        let secret = testBytes(count: 1000, seed: 42)
        try await admin.uploadFile(
            data: secret, attachment: AttachmentSync.Attachment(id: "s", filename: secretKey, state: .queuedUpload))
        let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup)
        let device = HostileDevice(issuer: issuer, client: client, bucket: bucket.name)
        do {
            for attack in Self.attacks(secret: secret) {
                try await attack.run(device, "\(label)-\(attack.filename)")
                let key = "users/alice/\(label)-\(attack.filename)"
                let stored = try? await admin.downloadFile(
                    attachment: AttachmentSync.Attachment(id: "k", filename: key, state: .synced))
                #expect(stored != secret, "\(label): \(attack) put bob's object into alice's prefix")
                var anonymous = HTTPClientRequest(url: "\(bucket.server.endpoint.absoluteString)/\(bucket.name)/\(key)")
                anonymous.method = .GET
                let response = try await client.execute(anonymous, timeout: .seconds(30))
                _ = try await response.body.collect(upTo: 1 << 20)
                #expect(response.status != .ok, "\(label): \(attack) made alice's object readable by anyone")
            }
        } catch {
            try? await client.shutdown()
            throw error
        }
        try await client.shutdown()
    }

    @Test("a device holding presigned upload URLs cannot copy another user's object in or make its own public")
    func hostileHeadersDoNotLeaveThePrefix() async throws {
        try await S3TestBucket.with("confine") { admin, bucket in
            // Signing with the bucket account's own key, which reads every object: the issuer finds on the
            // server that its upload URLs could copy, and authorises no upload at all.
            let ownerKey = try PresignedURLIssuer(storage: bucket.configuration(), maxObjectSize: 1 << 20)
                .forUser(prefix: "users/alice/")
            try await Self.checkAttacks(ownerKey, bucket: bucket, admin: admin, label: "owner-key")
            let refused = await #expect(throws: AttachmentError.self) {
                try await ownerKey.authorize(Self.put("photo.jpg", length: 10))
            }
            #expect(refused?.code == .invalidConfiguration)
            #expect(refused?.name == "uploadCredentials")
            #expect(refused?.message.contains("x-amz-copy-source") == true)
            try await ownerKey.shutdown()

            // Signing uploads with a write-only key: every attack is refused by the server, and uploads work.
            let server = bucket.server
            let writeOnly = try PresignedURLIssuer(
                storage: bucket.configuration(), maxObjectSize: 1 << 20,
                uploadCredentials: .static(accessKeyId: server.uploadAccessKey, secretAccessKey: server.uploadSecretKey)
            ).forUser(prefix: "users/alice/")
            try await Self.checkAttacks(writeOnly, bucket: bucket, admin: admin, label: "write-only")
            let device = try PresignedRemoteStorageTests.device(bucket) { try await writeOnly.authorize($0) }
            let photo = Data("alice's photo".utf8)
            try await device.uploadFile(data: photo, attachment: PresignedRemoteStorageTests.attachment("p.jpg", photo))
            #expect(try await device.downloadFile(attachment: PresignedRemoteStorageTests.attachment("p.jpg")) == photo)
            try await device.shutdown()
            try await writeOnly.shutdown()
            #expect(
                try await admin.listKeys().filter { $0.contains(".attachment-sync-probe-") }.isEmpty,
                "the confinement check leaves nothing behind")
        }
    }
}
