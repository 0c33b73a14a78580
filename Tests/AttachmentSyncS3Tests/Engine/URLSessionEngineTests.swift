import AttachmentSync
import AttachmentSyncTesting
import Crypto
import Foundation
import NIOHTTP1
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// URLSessionEngine against the scripted loopback server (heads, headers, redirects, stalls) and the real
/// nginx WebDAV server (PUT and GET of real bytes).
@Suite("URLSessionEngine")
struct URLSessionEngineTests {
    @Test("a GET returns its status and headers at once and its body byte for byte")
    func getReturnsStatusHeadersAndBodyByteExact() async throws {
        let body = testBytes(count: 300_000, seed: 3)
        let script: ScriptedHTTPServer.Handler = { _ in
            ScriptedResponse(.created, headers: [("X-Custom-Header", "some value"), ("ETag", "\"abc\"")], body: body)
        }
        try await withScriptedServer(script) { server, engine in
            let response = try await engine.execute(HTTPEngineRequest(method: .get, url: server.url("/object")))
            #expect(response.status == .created)
            #expect(response.headers.first(name: "x-custom-header") == "some value")
            #expect(response.headers.first(name: "ETAG") == "\"abc\"")
            #expect(response.headers.first(name: "Content-Length") == String(body.count))
            #expect(try await response.body.collect(upTo: 1 << 20) == body)
        }
    }

    @Test("a slow reader keeps the response's memory under the buffer limit")
    func slowReaderKeepsResponseMemoryUnderTheLimit() async throws {
        let body = testBytes(count: 8 << 20, seed: 4)
        var limits = URLSessionEngine.Limits()
        limits.responseBuffer = 256 << 10
        let script: ScriptedHTTPServer.Handler = { _ in ScriptedResponse(.ok, body: body) }
        try await withScriptedServer(limits: limits, script) { server, engine in
            let response = try await engine.execute(HTTPEngineRequest(method: .get, url: server.url("/big")))
            let iterator = response.body.makeAsyncIterator()
            let first = try await iterator.next()
            var received = try #require(first)
            // The reader stops until the network got far ahead of it.
            let limit = limits.responseBuffer
            let spillable = Int64(body.count - limit - received.count)
            try await withDeadline("the body arrived in full") {
                #if canImport(Darwin)
                    await engine.statistics.waitUntil { $0.maximumBufferedBytes > limit / 2 }
                #else
                    await engine.statistics.waitUntil { $0.spilledBytes >= spillable }
                #endif
            }
            for _ in 0..<body.count {
                guard let chunk = try await iterator.next() else { break }
                received.append(chunk)
            }
            #expect(received == body)
            #if !canImport(Darwin)
                #expect(engine.statistics.snapshot.maximumBufferedBytes <= limits.responseBuffer)
                #expect(engine.statistics.snapshot.spilledBytes > 0)
            #endif
        }
    }

    @Test("the given headers go as given, with Accept-Encoding: identity and no cookie")
    func sendsTheGivenHeadersAndAcceptEncodingIdentity() async throws {
        let script: ScriptedHTTPServer.Handler = { _ in ScriptedResponse(.ok, headers: [("Set-Cookie", "session=1")]) }
        try await withScriptedServer(script) {
            server, engine in
            let headers: HTTPHeaderFields = [
                ("Range", "bytes=0-9"), ("If-Match", "\"etag-1\""), ("If-None-Match", "*"),
                ("Authorization", "AWS4-HMAC-SHA256 Credential=a/b, Signature=c"),
                ("x-amz-date", "20240101T000000Z"), ("x-amz-meta-sha256", "00ff"), ("Content-Length", "5"),
            ]
            let put = HTTPEngineRequest(
                method: .put, url: server.url("/a"), headers: headers, body: .bytes(Data("hello".utf8)))
            _ = try await engine.execute(put).body.collect(upTo: 1 << 20)
            _ = try await engine.execute(HTTPEngineRequest(method: .get, url: server.url("/b"))).body.collect(
                upTo: 1 << 20)
            let empty = HTTPEngineRequest(method: .put, url: server.url("/c"), body: .bytes(Data()))
            _ = try await engine.execute(empty).body.collect(upTo: 1 << 20)
            let requests = server.requests
            try #require(requests.count == 3)
            for (name, value) in headers {
                #expect(requests[0].headers[name] == [value], "\(name)")
            }
            #expect(requests[0].header("Accept-Encoding") == "identity")
            #expect(requests[1].header("Cookie") == nil)  // the Set-Cookie of the first answer was not kept
            #expect(requests[1].header("Content-Length") == nil)
            #expect(requests[2].header("Content-Length") == "0")
        }
    }

    @Test("a redirect is returned, never followed")
    func redirectIsReturnedNotFollowed() async throws {
        let script: ScriptedHTTPServer.Handler = { request in
            request.uri == "/from"
                ? ScriptedResponse(.found, headers: [("Location", "/to")], body: Data("moved".utf8))
                : ScriptedResponse(.ok, body: Data("elsewhere".utf8))
        }
        try await withScriptedServer(script) { server, engine in
            let response = try await engine.execute(HTTPEngineRequest(method: .get, url: server.url("/from")))
            #expect(response.status.code == 302)
            #expect(response.headers.first(name: "location") == "/to")
            #expect(try await response.body.collect(upTo: 1024) == Data("moved".utf8))
            #expect(server.requests.map(\.uri) == ["/from"])
        }
    }

    @Test("a gzip-encoded body is refused, not handed over decoded")
    func encodedBodyIsRefusedNotDecoded() async throws {
        let raw = Data(base64Encoded: "H4sIAAAAAAAAA8tIzcnJBwCGphA2BQAAAA==")!  // gzip of "hello"
        let script: ScriptedHTTPServer.Handler = { _ in
            ScriptedResponse(.ok, headers: [("Content-Encoding", "gzip")], body: raw)
        }
        try await withScriptedServer(script) { server, engine in
            let response = try await engine.execute(HTTPEngineRequest(method: .get, url: server.url("/gz")))
            #expect(response.status == .ok)
            #expect(response.headers.first(name: "content-encoding") == "gzip")
            await #expect(throws: URLSessionEngineError.encodedBody("gzip")) {
                _ = try await response.body.collect(upTo: 1024)
            }
            #expect(server.requests.first?.header("Accept-Encoding") == "identity")
        }
    }

    @Test("cancelling while waiting for the head ends the request at once")
    func cancellingDuringExecuteEndsPromptly() async throws {
        let (arrived, arrival) = AsyncStream<Void>.makeStream()
        let release = Release()
        let script: ScriptedHTTPServer.Handler = { _ in
            arrival.yield()
            await release.wait()
            return ScriptedResponse(.ok)
        }
        try await withScriptedServer(script) { server, engine in
            let request = Task { try await engine.execute(HTTPEngineRequest(method: .get, url: server.url("/slow"))) }
            _ = try await firstElement("the request reached the server", in: arrived) { true }
            request.cancel()
            let result = try await withDeadline("the cancelled request ended") { await request.result }
            #expect(throws: CancellationError.self) { try result.get() }
            await engine.statistics.waitUntil { $0.completedRequests == 1 }
        }
        release.open()
    }

    @Test("cancelling while reading a stalled body ends the request at once")
    func cancellingWhileReadingTheBodyEndsPromptly() async throws {
        let script: ScriptedHTTPServer.Handler = { _ in
            ScriptedResponse(.ok, body: testBytes(count: 100_000), holdAfter: 1000)
        }
        try await withScriptedServer(script) { server, engine in
            let response = try await engine.execute(HTTPEngineRequest(method: .get, url: server.url("/stall")))
            let reader = Task {
                var count = 0
                for try await chunk in response.body { count += chunk.count }
                return count
            }
            // The first 1,000 bytes arrive, then nothing: the reader waits.
            await engine.statistics.waitUntil { $0.maximumBufferedBytes > 0 }
            reader.cancel()
            let result = try await withDeadline("the cancelled read ended") { await reader.result }
            #expect(throws: CancellationError.self) { try result.get() }
            try await withDeadline("the task completed") {
                await engine.statistics.waitUntil { $0.completedRequests == 1 }
            }
        }
    }

    @Test("a body dropped unread ends its request")
    func droppingAnUnreadBodyCancelsTheRequest() async throws {
        let script: ScriptedHTTPServer.Handler = { _ in
            ScriptedResponse(.ok, body: testBytes(count: 100_000), holdAfter: 10)
        }
        try await withScriptedServer(script) { server, engine in
            do {
                let response = try await engine.execute(HTTPEngineRequest(method: .get, url: server.url("/drop")))
                #expect(response.status == .ok)
            }
            // The server never finishes this body: only the engine cancelling the task completes it.
            try await withDeadline("the dropped request was cancelled") {
                await engine.statistics.waitUntil { $0.completedRequests == 1 }
            }
        }
    }

    @Test("shutdown ends running requests and refuses new ones")
    func shutdownEndsRunningRequestsAndRefusesNewOnes() async throws {
        let script: ScriptedHTTPServer.Handler = { _ in
            ScriptedResponse(.ok, body: testBytes(count: 100_000), holdAfter: 10)
        }
        try await withScriptedServer(script) { server, engine in
            let response = try await engine.execute(HTTPEngineRequest(method: .get, url: server.url("/a")))
            try await withDeadline("shutdown returned") { try await engine.shutdown() }
            await #expect(throws: URLSessionEngineError.shutDown) {
                _ = try await response.body.collect(upTo: 1 << 20)
            }
            await #expect(throws: URLSessionEngineError.shutDown) {
                _ = try await engine.execute(HTTPEngineRequest(method: .get, url: server.url("/b")))
            }
            try await engine.shutdown()  // again: nothing happens
        }
    }
}

/// A gate the scripted server's handler waits at until the test opens it.
final class Release: Sendable {
    private let state = LockedValue<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func wait() async {
        await withCheckedContinuation { continuation in
            let open = state.withLock { state -> Bool in
                if !state.open { state.waiters.append(continuation) }
                return state.open
            }
            if open { continuation.resume() }
        }
    }

    func open() {
        let waiters = state.withLock { state in
            state.open = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}

extension ScriptedHTTPServer {
    func url(_ path: String) -> String { baseURL.absoluteString + path }
}

/// Runs `body` with a scripted server and an engine, and stops both after.
func withScriptedServer(
    limits: URLSessionEngine.Limits = URLSessionEngine.Limits(),
    _ handler: @escaping ScriptedHTTPServer.Handler,
    _ body: (ScriptedHTTPServer, URLSessionEngine) async throws -> Void
) async throws {
    let server = try await ScriptedHTTPServer.start(handler)
    let engine = URLSessionEngine(limits: limits)
    do {
        try await body(server, engine)
    } catch {
        try? await engine.shutdown()
        await server.stop()
        throw error
    }
    try await engine.shutdown()
    await server.stop()
}
