import AttachmentSync
import Foundation
import NIOHTTP1
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// The date and the file layer the adapters are given are the ones they use: requests signed with the
/// configured date, waits counted from it, files written and read through the configured layer.
@Suite("HTTP transport dependencies: the configured date and file layer")
struct HTTPTransportDependenciesTests {
    /// 2013-05-24T00:00:00Z: years before any machine running these tests, so a date read from the wall
    /// clock instead of the configured one shows.
    static let configuredDate = Date(timeIntervalSince1970: 1_369_353_600)

    /// Runs `body` with a scripted server answering every request with `response`, and a folder.
    private static func withServer(
        answering response: ScriptedResponse, _ body: (ScriptedHTTPServer, URL) async throws -> Void
    ) async throws {
        let server = try await ScriptedHTTPServer.start { _ in response }
        var failure: (any Error)?
        do {
            try await withTemporaryDirectory { directory in try await body(server, directory) }
        } catch {
            failure = error
        }
        await server.stop()
        if let failure { throw failure }
    }

    private static func s3Storage(
        _ server: ScriptedHTTPServer, configure: (inout S3RemoteStorage.Configuration) -> Void = { _ in }
    ) throws -> S3RemoteStorage {
        var configuration = S3RemoteStorage.Configuration(
            endpoint: server.baseURL, bucket: "photos",
            credentials: .static(accessKeyId: "AKIDEXAMPLE", secretAccessKey: "secret-key-never-shown"))
        configuration.now = { Self.configuredDate }
        configure(&configuration)
        return try S3RemoteStorage(configuration: configuration)
    }

    private static func httpStorage(
        _ server: ScriptedHTTPServer, configure: (inout HTTPRemoteStorage.Configuration) -> Void = { _ in }
    ) throws -> HTTPRemoteStorage {
        var configuration = HTTPRemoteStorage.Configuration(baseURL: server.baseURL.appendingPathComponent("files"))
        configuration.storesContentHashes = false
        configuration.now = { Self.configuredDate }
        configure(&configuration)
        return try HTTPRemoteStorage(configuration: configuration)
    }

    @Test("S3 requests and presigned URLs are signed with the configured date, not the device's clock")
    func s3SignsWithTheConfiguredDate() async throws {
        try await Self.withServer(answering: ScriptedResponse(.ok)) { server, _ in
            let storage = try Self.s3Storage(server)
            // When
            try await storage.uploadFile(data: Data("photo".utf8), attachment: attachment("a.jpg"))
            let url = try await storage.presignedURL(for: attachment("a.jpg"))
            try await storage.shutdown()

            // Then: the request the server got is dated, and its signature scoped, 24 May 2013
            let put = try #require(server.requests.first)
            #expect(put.method == .PUT)
            #expect(put.header("x-amz-date") == "20130524T000000Z")
            let authorization = try #require(put.header("authorization"))
            #expect(
                authorization.hasPrefix("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20130524/us-east-1/s3/aws4_request,"),
                "\(authorization)")
            let query = try #require(URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems)
            #expect(query.first { $0.name == "X-Amz-Date" }?.value == "20130524T000000Z")
        }
    }

    @Test("a Retry-After given as a date is counted from the configured date: the wait the queue honours")
    func retryAfterDateIsCountedFromTheConfiguredDate() async throws {
        // Given: servers that are busy until two minutes after the configured date
        let busy = ScriptedResponse(
            .serviceUnavailable, headers: [("retry-after", "Fri, 24 May 2013 00:02:00 GMT")])
        try await Self.withServer(answering: busy) { server, _ in
            let http = try Self.httpStorage(server)
            let s3 = try Self.s3Storage(server)
            // When
            let httpError = await #expect(throws: AttachmentError.self) {
                try await http.downloadFile(attachment: attachment("a.jpg"))
            }
            let s3Error = await #expect(throws: AttachmentError.self) {
                try await s3.deleteFile(attachment: attachment("a.jpg"))
            }
            try await http.shutdown()
            try await s3.shutdown()

            // Then: wait two minutes (counted from the wall clock the date is long past: no wait at all)
            #expect(httpError?.code == .remoteUnavailable)
            #expect(httpError?.retryAfter == .seconds(120))
            #expect(s3Error?.code == .remoteUnavailable)
            #expect(s3Error?.retryAfter == .seconds(120))
        }
    }

    @Test("a download is written through the configured file layer: a full disk fails it with fileSystem")
    func downloadWritesThroughTheFileLayer() async throws {
        let content = testBytes(count: 100_000, seed: 3)
        try await Self.withServer(answering: ScriptedResponse(.ok, body: content)) { server, directory in
            let storage = try Self.httpStorage(server) { $0.files = RefusingDisk(refusesWriting: true) }
            let destination = directory.appendingPathComponent("download")
            // When
            let error = await #expect(throws: AttachmentError.self) {
                _ = try await storage.downloadFile(
                    attachment: attachment("a.jpg"), into: destination, from: 0, progress: { _ in })
            }
            try await storage.shutdown()

            // Then: a local failure naming the file (not a remote one the queue would blame the server for),
            // and nothing written
            #expect(error?.code == .fileSystem)
            #expect(error?.path == destination.path)
            #expect(!FileManager.default.fileExists(atPath: destination.path))
        }
    }

    @Test("an upload is read through the configured file layer: an unreadable file sends nothing")
    func uploadReadsThroughTheFileLayer() async throws {
        try await Self.withServer(answering: ScriptedResponse(.ok)) { server, directory in
            let storage = try Self.s3Storage(server) { $0.files = RefusingDisk(refusesReading: true) }
            let file = directory.appendingPathComponent("photo.jpg")
            try Data("photo".utf8).write(to: file)
            // When
            let error = await #expect(throws: AttachmentError.self) {
                try await storage.uploadFile(fileURL: file, attachment: attachment("a.jpg"), progress: { _ in })
            }
            try await storage.shutdown()

            // Then
            #expect(error?.code == .fileSystem)
            #expect(error?.path == file.path)
            #expect(server.requests.isEmpty)
        }
    }
}
