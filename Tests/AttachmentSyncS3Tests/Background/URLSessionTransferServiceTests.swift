import AttachmentSync
import Foundation
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// The URLSession service's own code, on Linux (FoundationNetworking; no background sessions here, so its
/// transfers run in this process): requests formed by the S3 adapter, run against Ceph, each result kept in
/// the folder until acknowledged, a download's body with it.
@Suite("URLSession transfer service")
struct URLSessionTransferServiceTests {
    @Test(
        "an upload and a download run in the session; their results wait in the folder, across a new service, until acknowledged"
    )
    func resultsWaitUntilAcknowledged() async throws {
        try await S3TestBucket.with("urlsession-service") { storage, _ in
            try await withTemporaryDirectory { folder in
                let content = testBytes(count: 700_000, seed: 41)
                let file = folder.appendingPathComponent("photo.jpg")
                try content.write(to: file)
                let photo = BackgroundRequestTests.attachment("photo.jpg", content)
                let configuration = URLSessionTransferService.Configuration(
                    identifier: "attachment-sync.tests", folder: folder.appendingPathComponent("transfers"))
                let service = try URLSessionTransferService(configuration: configuration)
                defer { service.invalidateAndCancel() }
                let notifications = service.resultsMayHaveArrived()

                let upload = try #require(try await storage.backgroundUploadRequest(for: photo, fileURL: file))
                try await service.hand(
                    BackgroundTransfer(id: "up-1", direction: .upload, request: upload, bodyFile: file))
                let uploaded = try await Self.waitForResult("up-1", service, notifications)
                #expect(uploaded.statusCode == 200, "\(uploaded)")
                #expect(uploaded.bodyFile == nil)
                #expect(try await storage.storedObject(for: photo)?.sha256 == photo.contentHash)

                let download = try #require(try await storage.backgroundDownloadRequest(for: photo))
                try await service.hand(BackgroundTransfer(id: "down-1", direction: .download, request: download))
                let missing = BackgroundRequestTests.attachment("absent.jpg", content)
                try await service.hand(
                    BackgroundTransfer(
                        id: "down-2", direction: .download,
                        request: try #require(try await storage.backgroundDownloadRequest(for: missing))))
                let downloaded = try await Self.waitForResult("down-1", service, notifications)
                let absent = try await Self.waitForResult("down-2", service, notifications)
                #expect(downloaded.statusCode == 200)
                let body = try #require(downloaded.bodyFile)
                #expect(try Data(contentsOf: body) == content)
                #expect(downloaded.header("x-amz-meta-sha256") == photo.contentHash)
                #expect(absent.statusCode == 404)
                #expect(absent.bodyFile == nil, "a failed download's body is not kept")
                #expect(try await service.running().isEmpty)

                // The app relaunched: a new service on the same folder has the same results.
                let relaunched = try URLSessionTransferService(configuration: configuration)
                defer { relaunched.invalidateAndCancel() }
                #expect(Set(try await relaunched.results().map(\.id)) == ["up-1", "down-1", "down-2"])
                for id in ["up-1", "down-1", "down-2"] { try await relaunched.acknowledge(id) }
                #expect(try await relaunched.results().isEmpty)
                #expect(!FileManager.default.fileExists(atPath: body.path))
            }
        }
    }

    @Test("a transfer in flight is running; ids that cannot name a file and non-HTTP URLs are refused")
    func runningAndRefusals() async throws {
        try await withTemporaryDirectory { folder in
            let service = try URLSessionTransferService(
                configuration: .init(identifier: "attachment-sync.tests.refusals", folder: folder))
            defer { service.invalidateAndCancel() }
            let request = PreparedRequest(method: "GET", url: URL(string: "http://127.0.0.1:7480/")!)
            await #expect(throws: AttachmentError.self) {
                try await service.hand(BackgroundTransfer(id: "../escape", direction: .download, request: request))
            }
            await #expect(throws: AttachmentError.self) {
                try await service.hand(
                    BackgroundTransfer(
                        id: "file", direction: .download,
                        request: PreparedRequest(method: "GET", url: URL(fileURLWithPath: "/etc/passwd"))))
            }
            await #expect(throws: AttachmentError.self) {
                try await service.hand(BackgroundTransfer(id: "no-body", direction: .upload, request: request))
            }
            #expect(throws: AttachmentError.self) {
                try URLSessionTransferService(configuration: .init(identifier: "", folder: folder))
            }
            #expect(try await service.results().isEmpty)

            // A server that sends 10 bytes of a 1,000-byte body and then nothing; another that redirects.
            let server = try await ScriptedHTTPServer.start { request in
                request.uri.hasPrefix("/stall")
                    ? ScriptedResponse(.ok, body: Data(count: 1_000), holdAfter: 10)
                    : ScriptedResponse(.found, headers: [("Location", "http://127.0.0.1:1/elsewhere")])
            }
            let notifications = service.resultsMayHaveArrived()
            try await service.hand(
                BackgroundTransfer(
                    id: "stalled", direction: .download,
                    request: PreparedRequest(method: "GET", url: server.baseURL.appendingPathComponent("stall"))))
            try await service.hand(
                BackgroundTransfer(
                    id: "moved", direction: .download,
                    request: PreparedRequest(method: "GET", url: server.baseURL.appendingPathComponent("moved"))))
            let moved = try await Self.waitForResult("moved", service, notifications)
            #expect(moved.statusCode == 302, "the redirect is not followed: \(moved)")
            #expect(moved.bodyFile == nil)
            #expect(try await service.running() == ["stalled"])
            service.invalidateAndCancel()
            await server.stop()
        }
    }

    /// Waits (bounded) for the result `id`, woken by the service's notifications.
    static func waitForResult(
        _ id: String, _ service: URLSessionTransferService, _ notifications: AsyncStream<Void>
    ) async throws -> BackgroundTransferResult {
        try await withDeadline("the result of \(id)") {
            var iterator = notifications.makeAsyncIterator()
            // Looked for before each wait: a notification taken while waiting for another result may have been
            // this one's.
            while true {
                if let result = try await service.results().first(where: { $0.id == id }) { return result }
                guard await iterator.next() != nil else {
                    throw AttachmentError(code: .timedOut, message: "the notifications ended before \(id)'s result")
                }
            }
        }
    }
}
