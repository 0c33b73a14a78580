import AsyncHTTPClient
import AttachmentSync
import Foundation
import NIOCore
import NIOHTTP1
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// A bucket of its own on the local Ceph server for one test, created through the adapter's own signed
/// requests and emptied and deleted afterwards.
struct S3TestBucket {
    let name: String
    let stateDirectory: URL
    let server = TestServers.s3

    /// A configuration for this bucket; `configure` adjusts it.
    func configuration(
        _ configure: (inout S3RemoteStorage.Configuration) -> Void = { _ in }
    ) -> S3RemoteStorage.Configuration {
        var configuration = S3RemoteStorage.Configuration(
            endpoint: server.endpoint, region: server.region, bucket: name,
            credentials: .static(accessKeyId: server.accessKey, secretAccessKey: server.secretKey))
        configuration.stateDirectory = stateDirectory
        configure(&configuration)
        return configuration
    }

    /// A new adapter for this bucket, for tests that need a second one (another device, a restart).
    func makeStorage(
        transport: TestTransport = .asyncHTTPClient,
        _ configure: (inout S3RemoteStorage.Configuration) -> Void = { _ in }
    ) throws -> S3RemoteStorage {
        try S3RemoteStorage(configuration: configuration(configure), transport: transport.transport)
    }

    /// Credentials from a custom provider whose first answer has been revoked (a wrong secret) and whose
    /// later answers are good; `calls` counts the calls.
    func credentialsRevokedOnce(counting calls: LockedValue<Int>) -> S3RemoteStorage.CredentialsProvider {
        let server = server
        return .custom {
            let call = calls.withLock { count -> Int in
                count += 1
                return count
            }
            return S3Credentials(
                accessKeyId: server.accessKey, secretAccessKey: call == 1 ? "revoked-secret" : server.secretKey,
                expiration: Date().addingTimeInterval(3600))
        }
    }

    /// Runs `body` with an adapter on a fresh bucket, then deletes every object, aborts every multipart upload
    /// and deletes the bucket, whether `body` succeeded or not.
    static func with(
        _ label: String, transport: TestTransport = .asyncHTTPClient,
        configure: (inout S3RemoteStorage.Configuration) -> Void = { _ in },
        _ body: (S3RemoteStorage, S3TestBucket) async throws -> Void
    ) async throws {
        try await TestServers.requireReachable(TestServers.s3.endpoint, startCommand: "scripts/s3-server start")
        try await withTemporaryDirectory { directory in
            let bucket = S3TestBucket(name: TestServers.uniqueBucketName(label), stateDirectory: directory)
            let storage = try bucket.makeStorage(transport: transport, configure)
            var failure: (any Error)?
            do {
                try await storage.createBucket()
                try await body(storage, bucket)
            } catch {
                failure = error
            }
            do {
                try await bucket.destroy()
            } catch {
                Issue.record("could not clean up bucket \(bucket.name): \(error)")
            }
            try await storage.shutdown()
            if let failure { throw failure }
        }
    }

    /// Empties and deletes the bucket.
    func destroy() async throws {
        let storage = try makeStorage()
        do {
            try await storage.abortStaleMultipartUploads(olderThan: .zero)
            for key in try await storage.listKeys() {
                try await storage.deleteFile(attachment: attachment(key))
            }
            try await storage.deleteBucket()
        } catch {
            try await storage.shutdown()
            throw error
        }
        try await storage.shutdown()
    }
}

extension S3RemoteStorage {
    /// Every key in the bucket (test clean-up), at most 10,000.
    func listKeys() async throws -> [String] {
        var keys: [String] = []
        var token: String?
        for _ in 0..<10 {
            var query: [(name: String, value: String)] = [("list-type", "2")]
            if let token { query.append(("continuation-token", token)) }
            let request = S3Request(method: .get, key: nil, query: query, operation: "ListObjectsV2")
            let response = try await send(request, attachmentId: nil)
            let body = try await transport.collect(response, event: request.event, attachmentId: nil, upTo: 16 << 20)
            let root = try #require(S3XML.parse(body))
            keys += root.children("Contents").compactMap { $0.value("Key") }
            guard root.value("IsTruncated") == "true", let next = root.value("NextContinuationToken") else { break }
            token = next
        }
        return keys
    }

    /// Deletes the (empty) bucket.
    func deleteBucket() async throws {
        let request = S3Request(method: .delete, key: nil, operation: "DeleteBucket")
        let response = try await send(request, attachmentId: nil)
        _ = try await transport.collect(response, event: request.event, attachmentId: nil, upTo: 1 << 20)
    }

    /// The ids of the multipart uploads in progress in the bucket.
    func listMultipartUploadIds() async throws -> [String] {
        let request = S3Request(method: .get, key: nil, query: [("uploads", "")], operation: "ListMultipartUploads")
        let response = try await send(request, attachmentId: nil)
        let body = try await transport.collect(response, event: request.event, attachmentId: nil, upTo: 16 << 20)
        return try #require(S3XML.parse(body)).children("Upload").compactMap { $0.value("UploadId") }
    }
}
