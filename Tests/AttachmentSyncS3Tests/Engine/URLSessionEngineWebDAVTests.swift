import AttachmentSync
import AttachmentSyncTesting
import Crypto
import Foundation
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// URLSessionEngine moving real bytes to and from the nginx WebDAV server on 127.0.0.1
/// (`scripts/webdav-server start`).
@Suite("URLSessionEngine over WebDAV")
struct URLSessionEngineWebDAVTests {
    let engine: URLSessionEngine
    let base: String

    init() async throws {
        try await TestServers.requireReachable(TestServers.webdav, startCommand: "scripts/webdav-server start")
        var limits = URLSessionEngine.Limits()
        limits.inMemoryFileBody = 4 << 20  // so a long range goes through a temporary copy
        engine = URLSessionEngine(limits: limits)
        base = TestServers.webdav.appendingPathComponent("open/engine-\(UUID().uuidString.lowercased())").absoluteString
    }

    /// Runs `body`, then removes the test's folder and shuts the engine down.
    private func withCleanUp(_ body: () async throws -> Void) async throws {
        var failure: (any Error)?
        do { try await body() } catch { failure = error }
        let response = try await engine.execute(HTTPEngineRequest(method: .delete, url: base + "/"))
        _ = try await response.body.collect(upTo: 1 << 20)
        try await engine.shutdown()
        if let failure { throw failure }
    }

    private func put(_ name: String, _ body: HTTPEngineRequestBody) async throws -> HTTPStatus {
        let response = try await engine.execute(HTTPEngineRequest(method: .put, url: "\(base)/\(name)", body: body))
        _ = try await response.body.collect(upTo: 1 << 20)
        return response.status
    }

    private func get(_ name: String, headers: HTTPHeaderFields = []) async throws -> (HTTPStatus, Data) {
        let response = try await engine.execute(
            HTTPEngineRequest(method: .get, url: "\(base)/\(name)", headers: headers))
        return (response.status, try await response.body.collect(upTo: 64 << 20))
    }

    @Test("PUT of bytes, of file ranges and of a whole file stores exactly those bytes")
    func putOfBytesAndOfFileRangesStoresExactlyThoseBytes() async throws {
        try await withCleanUp {
            try await withTemporaryDirectory { folder in
                let bytes = testBytes(count: 1_000_003, seed: 7)
                #expect(try await put("bytes", .bytes(bytes)).isSuccess)
                #expect(try await get("bytes").1 == bytes)

                let file = folder.appendingPathComponent("source")
                let content = testBytes(count: 20 << 20, seed: 8)
                try content.write(to: file)
                let ranges = [
                    ("small-range", 12_345, 3 << 20), ("long-range", 1, (20 << 20) - 1), ("whole", 0, 20 << 20),
                ]
                for (name, offset, length) in ranges {
                    let progress = LockedValue<Int64>(0)
                    let body = HTTPFileBody(
                        url: file, offset: Int64(offset), length: Int64(length), files: SystemFileOperations(),
                        throttle: nil, onChunk: { count in progress.withLock { $0 += Int64(count) } })
                    #expect(try await put(name, .file(body)).isSuccess)
                    #expect(progress.withLock { $0 } == Int64(length))
                    let (status, stored) = try await get(name)
                    #expect(status == .ok)
                    #expect(stored.count == length)
                    #expect(SHA256.hash(data: stored) == SHA256.hash(data: content[offset..<(offset + length)]))
                }
                // Only the long range was copied: a whole file is sent from where it is.
                #expect(engine.statistics.snapshot.temporaryCopies == 1)
                let (status, range) = try await get("whole", headers: [("Range", "bytes=1000-1999")])
                #expect(status == .partialContent)
                #expect(range == content[1000..<2000])
            }
        }
    }

    #if canImport(Darwin)
        /// Apple platforms: the bytes reported sent never run ahead of the throttle's budget (not run here:
        /// no Apple machine).
        @Test("an upload's bytes never run ahead of the throttle (Apple platforms)")
        func uploadThrottleHoldsTheRate() async throws {
            try await withCleanUp {
                try await withTemporaryDirectory { folder in
                    let file = folder.appendingPathComponent("source")
                    let content = testBytes(count: 1 << 20, seed: 9)
                    try content.write(to: file)
                    let clock = ManualClock()
                    let throttle = BandwidthThrottle(bytesPerSecond: 256 << 10, clock: clock)
                    let sent = LockedValue<Int64>(0)
                    let body = HTTPFileBody(
                        url: file, offset: 0, length: Int64(content.count), files: SystemFileOperations(),
                        throttle: throttle, onChunk: { count in sent.withLock { $0 += Int64(count) } })
                    let upload = Task {
                        let status = try await put("throttled", .file(body))
                        // Registers as a sleeper too, so the loop below always has one to wait for.
                        try? await clock.sleep(for: .seconds(1_000_000))
                        return status
                    }
                    defer { upload.cancel() }
                    var steps = 0
                    while sent.withLock({ $0 }) < Int64(content.count), steps < 400 {
                        try await withDeadline("the upload waited for the throttle or finished") {
                            await clock.waitForSleepers(count: 1)
                        }
                        let elapsed = Self.seconds(clock.now.offset)
                        let allowed = throttle.burstBytes + Int64((Double(256 << 10) * elapsed).rounded(.up))
                        // What the socket took before the suspension took effect goes on top.
                        #expect(sent.withLock { $0 } <= allowed + (1 << 20) / 4, "after \(elapsed) s")
                        await clock.advance(by: .milliseconds(250))
                        steps += 1
                    }
                    try await withDeadline("the upload finished") { await clock.waitForSleepers(count: 1) }
                    upload.cancel()  // ends its sleep
                    #expect(try await upload.value.isSuccess)
                    #expect(try await get("throttled").1 == content)
                }
            }
        }
    #else
        /// Linux: a throttled upload still sends exactly its bytes and reports them all (the throttle is paid
        /// after the bytes went: see `URLSessionUploadPacer`).
        @Test("a throttled upload sends all its bytes and pays the throttle for them (Linux)")
        func throttledUploadSendsItsBytes() async throws {
            try await withCleanUp {
                try await withTemporaryDirectory { folder in
                    let file = folder.appendingPathComponent("source")
                    let content = testBytes(count: 1 << 20, seed: 9)
                    try content.write(to: file)
                    let throttle = BandwidthThrottle(bytesPerSecond: 256 << 10, clock: ManualClock())
                    let sent = LockedValue<Int64>(0)
                    let body = HTTPFileBody(
                        url: file, offset: 0, length: Int64(content.count), files: SystemFileOperations(),
                        throttle: throttle, onChunk: { count in sent.withLock { $0 += Int64(count) } })
                    #expect(try await put("throttled", .file(body)).isSuccess)
                    #expect(sent.withLock { $0 } == Int64(content.count))
                    #expect(try await get("throttled").1 == content)
                }
            }
        }
    #endif

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
