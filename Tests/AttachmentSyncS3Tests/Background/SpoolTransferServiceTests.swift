import AttachmentSync
import AttachmentSyncTesting
import Crypto
import Foundation
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// The spooled background service (a process of its own, `attachment-sync-transfer-service`) moving real
/// bytes to and from nginx WebDAV on 127.0.0.1: what the queue's hand-off is tested with on Linux.
@Suite("Spooled background transfer service")
struct SpoolTransferServiceTests {
    /// Starts the service on `spool`; kill it when done.
    static func startService(_ spool: URL, _ options: [String] = []) throws -> ChildProcess {
        let tool = try CommandLineTool.locate("attachment-sync-transfer-service")
        return try ChildProcess(tool.url.path, [spool.path] + options)
    }

    /// Waits (bounded) until the service has a result for every id in `ids`.
    static func waitForResults(_ service: SpoolTransferService, _ ids: Set<String>) async throws
        -> [String: BackgroundTransferResult]
    {
        try await withDeadline("results for \(ids.sorted())") {
            for _ in 0..<3_000 {
                let results = try await service.results()
                if ids.isSubset(of: Set(results.map(\.id))) {
                    return Dictionary(uniqueKeysWithValues: results.map { ($0.id, $0) })
                }
                try await Task.sleep(for: .milliseconds(10))
            }
            throw AttachmentError(code: .timedOut, message: "no results for \(ids.sorted())")
        }
    }

    /// Sends one request on a client of its own; the status and the body (up to 16 MiB).
    static func send(_ request: HTTPEngineRequest) async throws -> (HTTPStatus, Data) {
        let engine = AsyncHTTPClientEngine(connectTimeout: .seconds(5), requestTimeout: .seconds(30))
        do {
            let response = try await engine.execute(request)
            let body = try await response.body.collect(upTo: 16 << 20)
            try await engine.shutdown()
            return (response.status, body)
        } catch {
            try? await engine.shutdown()
            throw error
        }
    }

    @Test("uploads and downloads handed over run in the service's process, and their results stay until acknowledged")
    func handedTransfersRunAndReport() async throws {
        try await TestServers.requireReachable(TestServers.webdav, startCommand: "scripts/webdav-server start")
        try await withTemporaryDirectory { folder in
            let base = TestServers.webdav.appendingPathComponent("open/spool-\(UUID().uuidString.lowercased())")
            let content = testBytes(count: 3_000_000, seed: 21)
            let file = folder.appendingPathComponent("photo.jpg")
            try content.write(to: file)
            let spool = folder.appendingPathComponent("spool")
            let service = try SpoolTransferService(folder: spool)
            let process = try Self.startService(spool)
            defer { process.kill() }

            let put = PreparedRequest(method: "PUT", url: base.appendingPathComponent("photo.jpg"))
            let notifications = service.resultsMayHaveArrived()
            try await service.hand(BackgroundTransfer(id: "up-1", direction: .upload, request: put, bodyFile: file))
            // The notification comes once the result is there: no polling by the caller.
            try await withDeadline("a notification of the result") {
                for await _ in notifications { break }
            }
            #expect(try await service.results().map(\.id) == ["up-1"])
            let uploaded = try await Self.waitForResults(service, ["up-1"])
            #expect(uploaded["up-1"]?.statusCode == 201, "\(String(describing: uploaded["up-1"]))")

            let get = PreparedRequest(method: "GET", url: base.appendingPathComponent("photo.jpg"))
            try await service.hand(BackgroundTransfer(id: "down-1", direction: .download, request: get))
            let missing = PreparedRequest(method: "GET", url: base.appendingPathComponent("absent.jpg"))
            try await service.hand(BackgroundTransfer(id: "down-2", direction: .download, request: missing))
            let downloaded = try await Self.waitForResults(service, ["down-1", "down-2"])
            let body = try #require(downloaded["down-1"]?.bodyFile)
            #expect(downloaded["down-1"]?.statusCode == 200)
            #expect(try Data(contentsOf: body) == content)
            #expect(downloaded["down-2"]?.statusCode == 404)
            #expect(downloaded["down-2"]?.bodyFile == nil)
            #expect(try await service.running().isEmpty)

            // A second client on the same spool (the app after a restart) sees the same results.
            let restarted = try SpoolTransferService(folder: spool)
            #expect(Set(try await restarted.results().map(\.id)) == ["up-1", "down-1", "down-2"])
            for id in ["up-1", "down-1", "down-2"] { try await restarted.acknowledge(id) }
            #expect(try await restarted.results().isEmpty)
            #expect(!FileManager.default.fileExists(atPath: body.path))

            #expect(try await Self.send(HTTPEngineRequest(method: .delete, url: base.absoluteString + "/")).0.isSuccess)
        }
    }

    @Test("a service killed while it runs a transfer runs it again when it starts again; nothing is lost")
    func killedServiceRunsTheTransferAgain() async throws {
        try await TestServers.requireReachable(TestServers.webdav, startCommand: "scripts/webdav-server start")
        try await withTemporaryDirectory { folder in
            let base = TestServers.webdav.appendingPathComponent("open/spool-\(UUID().uuidString.lowercased())")
            let spool = folder.appendingPathComponent("spool")
            let service = try SpoolTransferService(folder: spool)
            var contents: [String: Data] = [:]
            for index in 0..<20 {
                let content = testBytes(count: 400_000 + index, seed: UInt32(100 + index))
                let file = folder.appendingPathComponent("file-\(index)")
                try content.write(to: file)
                contents["up-\(index)"] = content
                let put = PreparedRequest(method: "PUT", url: base.appendingPathComponent("file-\(index)"))
                try await service.hand(
                    BackgroundTransfer(id: "up-\(index)", direction: .upload, request: put, bodyFile: file))
            }
            // After its first result the service sends each transfer it starts but reports none: killed then, it
            // leaves transfers unfinished, some of them sent.
            let first = try Self.startService(spool, ["--stall-after", "1"])
            _ = try await withDeadline("a first result") {
                for _ in 0..<3_000 {
                    if try await !service.results().isEmpty { return }
                    try await Task.sleep(for: .milliseconds(2))
                }
            }
            first.kill()
            _ = try await first.wait()
            #expect(try await service.running().count == 19, "the kill left transfers unfinished")

            let second = try Self.startService(spool)
            defer { second.kill() }
            let results = try await Self.waitForResults(service, Set(contents.keys))
            #expect(results.values.allSatisfy { $0.statusCode.map { (200..<300).contains($0) } == true })
            #expect(try await service.running().isEmpty)
            for (id, content) in contents {
                let index = id.dropFirst("up-".count)
                let (status, stored) = try await Self.send(
                    HTTPEngineRequest(method: .get, url: base.appendingPathComponent("file-\(index)").absoluteString))
                #expect(status == .ok && stored == content, "\(id)")
            }
            #expect(try await Self.send(HTTPEngineRequest(method: .delete, url: base.absoluteString + "/")).0.isSuccess)
        }
    }
}
