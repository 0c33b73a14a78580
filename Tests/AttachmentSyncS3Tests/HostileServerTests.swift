import AttachmentSync
import AttachmentSyncTesting
import Foundation
import NIOCore
import NIOHTTP1
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// An object as a server holds it, and how that server bends HTTP's rules: what the HTTP transport (shared by
/// the S3 and HTTP adapters) must survive. The server follows the rules unless told otherwise.
final class ServedObject: Sendable {
    struct Behaviour: Sendable {
        var content: Data
        var etag: String? = "\"v1\""
        /// Answer conditional requests as if the condition held.
        var ignoresIfMatch = false
        /// The `206` answer's range starts here instead of where it was asked to.
        var rangeStart: Int?
        /// Answer every ranged GET with `416`, whatever the range.
        var alwaysUnsatisfiable = false
        /// Stall after this many bytes of a whole (200) body.
        var holdAfter: Int?
        /// Send bodies chunked, without a `Content-Length`.
        var chunked = false
        /// The `Content-Length` claimed for a whole body, when not the content's.
        var claimedLength: Int64?
        /// Answer requests for the stored hash (`.attachment-sync-sha256-…`) with a head and then nothing.
        var stallsStoredHash = false
        /// Say `Accept-Ranges: bytes` but answer a range of both ends (`bytes=a-b`) with the whole body.
        var ignoresClosedRanges = false
        /// Ranges of both ends see the object as it is now: changed since the whole GET, with this `ETag`.
        var closedRangesSeeETag: String?
        /// Drop the connection after this many bytes of every body (whole or ranged).
        var closeAfter: Int?
    }

    let behaviour: LockedValue<Behaviour>

    init(_ content: Data) { behaviour = LockedValue(Behaviour(content: content)) }

    func change(_ body: (inout Behaviour) -> Void) { behaviour.withLock { body(&$0) } }

    func respond(_ request: ScriptedRequest) -> ScriptedResponse {
        let object = behaviour.withLock { $0 }
        if request.uri.contains(HTTPRemoteStorage.contentHashPrefix) {
            return object.stallsStoredHash
                ? ScriptedResponse(.ok, headers: [("content-length", "64")], holdAfter: 0)
                : ScriptedResponse(.notFound)
        }
        var headers: [(name: String, value: String)] = [("accept-ranges", "bytes")]
        let size = object.content.count
        // A range with both ends (`bytes=a-b`), as a split download asks for.
        let closed = request.header("range").flatMap { range -> (start: Int, end: Int)? in
            guard range.hasPrefix("bytes="), !range.hasSuffix("-") else { return nil }
            let bounds = range.dropFirst("bytes=".count).split(separator: "-")
            guard bounds.count == 2, let start = Int(bounds[0]), let end = Int(bounds[1]) else { return nil }
            return (start, min(end, size - 1))
        }
        let etag = closed != nil ? object.closedRangesSeeETag ?? object.etag : object.etag
        if let etag { headers.append(("etag", etag)) }
        if let condition = request.header("if-match"), !object.ignoresIfMatch, condition != etag {
            return ScriptedResponse(.preconditionFailed)
        }
        if let closed, !object.ignoresClosedRanges {
            headers.append(("content-range", "bytes \(closed.start)-\(closed.end)/\(size)"))
            return ScriptedResponse(
                .partialContent, headers: headers, body: object.content.subdata(in: closed.start..<(closed.end + 1)),
                closeAfter: object.closeAfter)
        }
        if request.method == .HEAD {
            headers.append(("content-length", String(size)))
            return ScriptedResponse(.ok, headers: headers)
        }
        if closed == nil, let range = request.header("range"), range.hasPrefix("bytes="), range.hasSuffix("-"),
            let asked = Int(range.dropFirst("bytes=".count).dropLast())
        {
            if asked >= size || object.alwaysUnsatisfiable {
                return ScriptedResponse(.rangeNotSatisfiable, headers: headers)
            }
            let start = object.rangeStart ?? asked
            headers.append(("content-range", "bytes \(start)-\(size - 1)/\(size)"))
            return ScriptedResponse(
                .partialContent, headers: headers, body: object.content.subdata(in: start..<size),
                closeAfter: object.closeAfter)
        }
        if object.chunked {
            headers.append(("transfer-encoding", "chunked"))
        } else if let claimed = object.claimedLength {
            headers.append(("content-length", String(claimed)))
        }
        return ScriptedResponse(
            .ok, headers: headers, body: object.content, holdAfter: object.holdAfter, closeAfter: object.closeAfter)
    }
}

@Suite("Hostile and broken servers (scripted, on 127.0.0.1)")
struct HostileServerTests {
    // Above HTTPTransport.smallestResumable: smaller downloads start over rather than resume.
    static let content = testBytes(count: 200_000, seed: 7)
    static let changed = testBytes(count: 200_000, seed: 8)

    /// Runs `body` with an HTTP adapter on a scripted server serving `object`, and a folder for downloads.
    static func with(
        _ object: ServedObject, transport: TestTransport,
        configure: (inout HTTPRemoteStorage.Configuration) -> Void = { _ in },
        _ body: (HTTPRemoteStorage, ScriptedHTTPServer, URL) async throws -> Void
    ) async throws {
        let server = try await ScriptedHTTPServer.start { request in object.respond(request) }
        var configuration = HTTPRemoteStorage.Configuration(baseURL: server.baseURL.appendingPathComponent("files"))
        configuration.storesContentHashes = false
        configure(&configuration)
        let storage = try HTTPRemoteStorage(configuration: configuration, transport: transport.transport)
        var failure: (any Error)?
        do {
            try await withTemporaryDirectory { directory in try await body(storage, server, directory) }
        } catch {
            failure = error
        }
        // The client first: once it is down no connection can be opening while the server closes.
        try await storage.shutdown()
        await server.stop()
        if let failure { throw failure }
    }

    /// A partial download of the first `count` bytes as the adapter leaves it when interrupted: the bytes, and
    /// beside them what identifies the object they came from. Made by a real download that the server stalls.
    private static func interruptedDownload(
        _ storage: HTTPRemoteStorage, _ object: ServedObject, _ server: ScriptedHTTPServer, into destination: URL,
        after count: Int
    ) async throws {
        object.change { $0.holdAfter = count }
        let arrived = AsyncStream.makeStream(of: Int64.self)
        let file = attachment("photo.jpg")
        let download = Task {
            try await storage.downloadFile(attachment: file, into: destination, from: 0) {
                arrived.continuation.yield($0.completedBytes)
            }
        }
        _ = try await withDeadline("the first bytes") {
            await arrived.stream.first { $0 >= Int64(count) }
        }
        download.cancel()
        _ = await download.result
        object.change { $0.holdAfter = nil }
        #expect(try Data(contentsOf: destination) == Self.content.prefix(count))
        #expect(FileManager.default.fileExists(atPath: HTTPTransport.resumeValidatorURL(for: destination).path))
    }

    @Test(
        "a resume asks for the rest on condition of the ETag, and appends only the rest",
        arguments: TestTransport.allCases)
    func resumeIsConditional(_ transport: TestTransport) async throws {
        let object = ServedObject(Self.content)
        try await Self.with(object, transport: transport) { storage, server, directory in
            let destination = directory.appendingPathComponent("partial")
            try await Self.interruptedDownload(storage, object, server, into: destination, after: 5000)
            let progress = ProgressRecorder()
            let info = try await storage.downloadFile(
                attachment: attachment("photo.jpg"), into: destination, from: 5000, progress: progress.handler)

            #expect(try Data(contentsOf: destination) == Self.content)
            #expect(info.size == 200_000)
            let resumed = try #require(server.requests.last)
            #expect(resumed.header("range") == "bytes=5000-")
            #expect(resumed.header("if-match") == "\"v1\"")
            #expect(progress.all.first?.completedBytes == 5000)
            #expect(!FileManager.default.fileExists(atPath: HTTPTransport.resumeValidatorURL(for: destination).path))
        }
    }

    @Test(
        "an object replaced since the partial download is fetched whole (412), never spliced",
        arguments: TestTransport.allCases)
    func changedObjectStartsOver(_ transport: TestTransport) async throws {
        let object = ServedObject(Self.content)
        try await Self.with(object, transport: transport) { storage, server, directory in
            let destination = directory.appendingPathComponent("partial")
            try await Self.interruptedDownload(storage, object, server, into: destination, after: 5000)
            object.change {
                $0.content = Self.changed
                $0.etag = "\"v2\""
            }
            _ = try await storage.downloadFile(
                attachment: attachment("photo.jpg"), into: destination, from: 5000, progress: { _ in })
            #expect(try Data(contentsOf: destination) == Self.changed)
            #expect(server.requests.suffix(2).map { $0.header("range") } == ["bytes=5000-", nil])
        }
    }

    @Test(
        "a server that ignores If-Match and serves another version's range is caught by its ETag",
        arguments: TestTransport.allCases)
    func ignoredConditionIsCaught(_ transport: TestTransport) async throws {
        let object = ServedObject(Self.content)
        try await Self.with(object, transport: transport) { storage, server, directory in
            let destination = directory.appendingPathComponent("partial")
            try await Self.interruptedDownload(storage, object, server, into: destination, after: 5000)
            object.change {
                $0.content = Self.changed
                $0.etag = "\"v2\""
                $0.ignoresIfMatch = true
            }
            _ = try await storage.downloadFile(
                attachment: attachment("photo.jpg"), into: destination, from: 5000, progress: { _ in })
            #expect(try Data(contentsOf: destination) == Self.changed)
        }
    }

    @Test(
        "a 206 for another range, or for an object of another size, starts the download over",
        arguments: TestTransport.allCases)
    func inconsistentPartialContentStartsOver(_ transport: TestTransport) async throws {
        for variant in ["another start", "another size"] {
            let object = ServedObject(Self.content)
            try await Self.with(object, transport: transport) { storage, server, directory in
                let destination = directory.appendingPathComponent("partial")
                try await Self.interruptedDownload(storage, object, server, into: destination, after: 5000)
                if variant == "another start" {
                    object.change { $0.rangeStart = 4000 }
                } else {
                    // Grown, with no ETag to tell (and so no If-Match that could refuse).
                    object.change {
                        $0.content = Self.content + Data("more".utf8)
                        $0.etag = nil
                    }
                }
                _ = try await storage.downloadFile(
                    attachment: attachment("photo.jpg"), into: destination, from: 5000, progress: { _ in })
                let expected = variant == "another start" ? Self.content : Self.content + Data("more".utf8)
                #expect(try Data(contentsOf: destination) == expected, "\(variant)")
                #expect(server.requests.last?.header("range") == nil, "\(variant): the last GET is whole")
            }
        }
    }

    @Test(
        "a 416 is complete only when the object is exactly the bytes held, and unchanged",
        arguments: TestTransport.allCases)
    func unsatisfiableRangeIsConfirmed(_ transport: TestTransport) async throws {
        let object = ServedObject(Self.content)
        try await Self.with(object, transport: transport) { storage, server, directory in
            // All bytes held (the process died before it could use them): a HEAD confirms, no body is read.
            let destination = directory.appendingPathComponent("complete")
            try await Self.interruptedDownload(storage, object, server, into: destination, after: 5000)
            let partial = try Data(contentsOf: destination)
            try (partial + Self.content.dropFirst(5000)).write(to: destination)
            let before = server.requests.count
            let info = try await storage.downloadFile(
                attachment: attachment("photo.jpg"), into: destination, from: 200_000, progress: { _ in })
            #expect(info.size == 200_000)
            #expect(try Data(contentsOf: destination) == Self.content)
            #expect(server.requests.dropFirst(before).map(\.method) == [.GET, .HEAD])

            // A 416 though the object is longer than what is held (a broken server): fetched whole.
            let short = directory.appendingPathComponent("short")
            try await Self.interruptedDownload(storage, object, server, into: short, after: 5000)
            object.change { $0.alwaysUnsatisfiable = true }
            _ = try await storage.downloadFile(
                attachment: attachment("photo.jpg"), into: short, from: 5000, progress: { _ in })
            #expect(try Data(contentsOf: short) == Self.content)
        }
    }

    @Test(
        "without a record of which object the bytes came from, a download starts over from byte 0",
        arguments: TestTransport.allCases)
    func noValidatorStartsOver(_ transport: TestTransport) async throws {
        let object = ServedObject(Self.content)
        try await Self.with(object, transport: transport) { storage, server, directory in
            let destination = directory.appendingPathComponent("partial")
            try Data(Self.changed.prefix(5000)).write(to: destination)  // bytes of who knows which version
            _ = try await storage.downloadFile(
                attachment: attachment("photo.jpg"), into: destination, from: 5000, progress: { _ in })
            #expect(try Data(contentsOf: destination) == Self.content)
            #expect(server.requests.map { $0.header("range") } == [nil])
        }
    }

    @Test(
        "a small object keeps no validator file while it downloads: interrupted, it is fetched again whole",
        arguments: TestTransport.allCases,
        // The largest size kept without a validator, and a 64 KiB photo stored encrypted (its header and a tag
        // per 64 KiB segment on top): as cheap to fetch again as the same photo stored plain.
        [Int(HTTPTransport.smallestResumable), (64 << 10) + 48 + 255 + 2 * 16])
    func smallDownloadsStartOver(_ transport: TestTransport, size: Int) async throws {
        let small = testBytes(count: size, seed: 9)
        let object = ServedObject(small)
        try await Self.with(object, transport: transport) { storage, server, directory in
            let destination = directory.appendingPathComponent("partial")
            object.change { $0.holdAfter = 5000 }
            let arrived = AsyncStream.makeStream(of: Int64.self)
            let download = Task {
                try await storage.downloadFile(attachment: attachment("photo.jpg"), into: destination, from: 0) {
                    arrived.continuation.yield($0.completedBytes)
                }
            }
            _ = try await withDeadline("the first bytes") { await arrived.stream.first { $0 >= 5000 } }
            download.cancel()
            _ = await download.result
            object.change { $0.holdAfter = nil }
            #expect(!FileManager.default.fileExists(atPath: HTTPTransport.resumeValidatorURL(for: destination).path))

            let before = server.requests.count
            _ = try await storage.downloadFile(
                attachment: attachment("photo.jpg"), into: destination, from: 5000, progress: { _ in })
            #expect(try Data(contentsOf: destination) == small)
            #expect(server.requests.dropFirst(before).map { $0.header("range") } == [nil])
        }
    }

    @Test(
        "an object whose size is not the attachment's is refused before its body is read",
        arguments: TestTransport.allCases)
    func wrongSizeIsRefused(_ transport: TestTransport) async throws {
        let object = ServedObject(Self.content)
        try await Self.with(object, transport: transport) { storage, _, directory in
            let file = AttachmentSync.Attachment(
                id: "photo", filename: "photo.jpg", state: .queuedDownload, size: 1000)
            let destination = directory.appendingPathComponent("download")
            let error = await #expect(throws: AttachmentError.self) {
                _ = try await storage.downloadFile(attachment: file, into: destination, from: 0, progress: { _ in })
            }
            #expect(error?.code == .integrityMismatch)
            #expect(error?.message.contains("200000") == true)

            // Sent chunked, with no length to refuse up front: writing stops at the attachment's size.
            object.change { $0.chunked = true }
            let chunked = await #expect(throws: AttachmentError.self) {
                _ = try await storage.downloadFile(attachment: file, into: destination, from: 0, progress: { _ in })
            }
            #expect(chunked?.code == .integrityMismatch)
            #expect(((try? Data(contentsOf: destination))?.count ?? 0) <= 1000)
        }
    }

    @Test(
        "a download into memory of an object above 1 GiB is refused without reading it",
        arguments: TestTransport.allCases)
    func hugeInMemoryDownloadIsRefused(_ transport: TestTransport) async throws {
        let object = ServedObject(Self.content)
        object.change {
            $0.claimedLength = 3 << 30
            $0.holdAfter = 0
        }
        try await Self.with(object, transport: transport) { storage, _, _ in
            let error = await #expect(throws: AttachmentError.self) {
                _ = try await storage.downloadFile(attachment: attachment("photo.jpg"))
            }
            #expect(error?.code == .unsupported)
        }
    }

    @Test(
        "a body that stalls is stopped after one window below the minimum rate; its bytes are kept",
        arguments: TestTransport.allCases)
    func stalledBodyIsStopped(_ transport: TestTransport) async throws {
        let clock = ManualClock()
        let object = ServedObject(Self.content)
        object.change { $0.holdAfter = 5000 }
        let configure: (inout HTTPRemoteStorage.Configuration) -> Void = {
            $0.clock = clock
            $0.minimumTransferRate = MinimumTransferRate(bytes: 4096, per: .seconds(30))
        }
        try await Self.with(object, transport: transport, configure: configure) { storage, _, directory in
            let destination = directory.appendingPathComponent("partial")
            let arrived = AsyncStream.makeStream(of: Int64.self)
            let download = Task {
                try await storage.downloadFile(attachment: attachment("photo.jpg"), into: destination, from: 0) {
                    arrived.continuation.yield($0.completedBytes)
                }
            }
            _ = try await withDeadline("the first bytes") { await arrived.stream.first { $0 >= 5000 } }

            // The first window moved 5,000 bytes: enough. The next moves none.
            await clock.waitForSleepers(count: 1)
            await clock.advance(by: .seconds(30))
            await clock.waitForSleepers(count: 1)
            await clock.advance(by: .seconds(30))
            let outcome = try await withDeadline("the stalled download to be stopped") { await download.result }
            #expect(throws: AttachmentError.self) { try outcome.get() }
            guard case .failure(let error as AttachmentError) = outcome else { return }
            #expect(error.code == .remoteUnavailable)
            #expect(error.message.contains("minimum transfer rate"))
            #expect(try Data(contentsOf: destination) == Self.content.prefix(5000), "kept for resuming")
        }
    }

    @Test(
        "a server that stalls its answer for the stored hash is stopped by the minimum rate too",
        arguments: TestTransport.allCases)
    func stalledStoredHashIsStopped(_ transport: TestTransport) async throws {
        let clock = ManualClock()
        let object = ServedObject(Self.content)
        object.change { $0.stallsStoredHash = true }
        let configure: (inout HTTPRemoteStorage.Configuration) -> Void = {
            $0.storesContentHashes = true
            $0.clock = clock
            $0.minimumTransferRate = MinimumTransferRate(bytes: 1, per: .seconds(30))
        }
        try await Self.with(object, transport: transport, configure: configure) { storage, server, directory in
            let download = Task {
                try await storage.downloadFile(
                    attachment: attachment("photo.jpg"), into: directory.appendingPathComponent("d"), from: 0
                ) { _ in }
            }
            // The watchdog is already measuring while the stored hash is asked for.
            try await withDeadline("the watchdog to sleep") { await clock.waitForSleepers(count: 1) }
            await clock.advance(by: .seconds(30))
            let outcome = try await withDeadline("the stalled request to be stopped") { await download.result }
            guard case .failure(let error as AttachmentError) = outcome else {
                Issue.record("expected remoteUnavailable, got \(outcome)")
                return
            }
            #expect(error.code == .remoteUnavailable)
            #expect(server.requests.map(\.uri).allSatisfy { $0.contains(HTTPRemoteStorage.contentHashPrefix) })
        }
    }

    @Test("minimumTransferRate must be positive")
    func invalidMinimumRateIsRejected() throws {
        for rate in [MinimumTransferRate(bytes: 0, per: .seconds(1)), MinimumTransferRate(bytes: 1, per: .zero)] {
            var configuration = HTTPRemoteStorage.Configuration(baseURL: URL(string: "http://127.0.0.1:9")!)
            configuration.minimumTransferRate = rate
            let error = #expect(throws: AttachmentError.self) {
                _ = try HTTPRemoteStorage(configuration: configuration)
            }
            #expect(error?.code == .invalidConfiguration)
            #expect(error?.name == "minimumTransferRate")
        }
    }
}

// MARK: - Split downloads

extension HostileServerTests {
    /// 15 parts of 64 KiB and one of 17,043 bytes.
    static let large = testBytes(count: 1_000_003, seed: 11)
    static let largeChanged = testBytes(count: 1_000_003, seed: 12)
    static let part = 65_536

    static func splitting(_ configuration: inout HTTPRemoteStorage.Configuration) {
        configuration.parallelDownloadThreshold = 500_000
        configuration.downloadPartSize = Int64(part)
        configuration.downloadConcurrency = 4
    }

    @Test(
        "a large file comes as ranges on condition of its ETag, each written in place, and is hashed on the way",
        arguments: TestTransport.allCases)
    func largeDownloadsAreSplit(_ transport: TestTransport) async throws {
        let object = ServedObject(Self.large)
        try await Self.with(object, transport: transport, configure: Self.splitting) { storage, server, directory in
            let destination = directory.appendingPathComponent("large")
            let progress = ProgressRecorder()
            let info = try await storage.downloadFile(
                attachment: attachment("photo.jpg"), into: destination, from: 0, progress: progress.handler)
            #expect(try Data(contentsOf: destination) == Self.large)
            #expect(info.writtenSize == 1_000_003)
            #expect(info.writtenSHA256 == FileStreaming.sha256(Self.large))
            // Part 0 from the whole GET; parts 1 to 15 as ranges, each pinned to the first answer's ETag.
            let ranged = server.requests.filter { $0.header("range") != nil }
            let expected = (1..<16).map { "bytes=\($0 * Self.part)-\(min(($0 + 1) * Self.part, 1_000_003) - 1)" }
            #expect(Set(ranged.compactMap { $0.header("range") }) == Set(expected))
            #expect(ranged.count == 15)
            #expect(ranged.allSatisfy { $0.header("if-match") == "\"v1\"" })
            #expect(progress.all.map(\.completedBytes).max() == 1_000_003)
            #expect(progress.last?.totalBytes == 1_000_003)
            #expect(!FileManager.default.fileExists(atPath: HTTPTransport.resumeValidatorURL(for: destination).path))
        }
    }

    @Test(
        "a server that says it serves ranges but answers one with the whole file: that answer is written",
        arguments: TestTransport.allCases)
    func ignoredRangesFallBackToOneBody(_ transport: TestTransport) async throws {
        let object = ServedObject(Self.large)
        object.change { $0.ignoresClosedRanges = true }
        try await Self.with(object, transport: transport, configure: Self.splitting) { storage, _, directory in
            let destination = directory.appendingPathComponent("large")
            let info = try await storage.downloadFile(
                attachment: attachment("photo.jpg"), into: destination, from: 0
            ) { _ in }
            #expect(try Data(contentsOf: destination) == Self.large)
            #expect(info.writtenSHA256 == FileStreaming.sha256(Self.large))
        }
    }

    @Test(
        "a file replaced during a split download: the download fails, keeps no hole, and starts over later",
        arguments: TestTransport.allCases)
    func replacedDuringTheDownload(_ transport: TestTransport) async throws {
        let object = ServedObject(Self.large)
        object.change { $0.closedRangesSeeETag = "\"v2\"" }
        try await Self.with(object, transport: transport, configure: Self.splitting) { storage, _, directory in
            let destination = directory.appendingPathComponent("large")
            let error = await #expect(throws: AttachmentError.self) {
                _ = try await storage.downloadFile(attachment: attachment("photo.jpg"), into: destination, from: 0) {
                    _ in
                }
            }
            #expect(error?.code == .remoteUnavailable)
            let kept = try Data(contentsOf: destination)
            #expect(kept.count <= Self.part)
            #expect(kept == Self.large.prefix(kept.count), "only bytes without a gap from byte 0 are kept")

            object.change {
                $0.content = Self.largeChanged
                $0.etag = "\"v2\""
                $0.closedRangesSeeETag = nil
            }
            let info = try await storage.downloadFile(
                attachment: attachment("photo.jpg"), into: destination, from: Int64(kept.count)
            ) { _ in }
            #expect(try Data(contentsOf: destination) == Self.largeChanged, "never two versions spliced")
            #expect(info.writtenSHA256 == FileStreaming.sha256(Self.largeChanged))
        }
    }

    @Test(
        "while parts after a gap are on disk no resume validator exists; an interrupted one keeps the prefix",
        arguments: TestTransport.allCases)
    func noValidatorOverAHole(_ transport: TestTransport) async throws {
        let object = ServedObject(Self.large)
        // The whole GET (part 0) stalls after 1,000 bytes; every range arrives.
        object.change { $0.holdAfter = 1000 }
        try await Self.with(object, transport: transport, configure: Self.splitting) { storage, _, directory in
            let destination = directory.appendingPathComponent("large")
            let arrived = AsyncStream.makeStream(of: Int64.self)
            let download = Task {
                try await storage.downloadFile(attachment: attachment("photo.jpg"), into: destination, from: 0) {
                    arrived.continuation.yield($0.completedBytes)
                }
            }
            _ = try await withDeadline("every range") {
                await arrived.stream.first { $0 >= Int64(1000 + 1_000_003 - Self.part) }
            }
            // A crash now would leave bytes 1,000 to 65,535 missing: nothing may say the file can be resumed.
            let validator = HTTPTransport.resumeValidatorURL(for: destination).path
            #expect(!FileManager.default.fileExists(atPath: validator))
            download.cancel()
            _ = await download.result
            #expect(try Data(contentsOf: destination) == Self.large.prefix(1000))
            #expect(FileManager.default.fileExists(atPath: validator))

            object.change { $0.holdAfter = nil }
            let info = try await storage.downloadFile(
                attachment: attachment("photo.jpg"), into: destination, from: 1000
            ) { _ in }
            #expect(try Data(contentsOf: destination) == Self.large)
            #expect(info.size == 1_000_003)
        }
    }
}

/// An S3 listing from a server that ignores the delimiter or breaks its paging.
@Suite("S3 listing from a hostile server")
struct HostileS3ListingTests {
    static func withListing(
        _ xml: String, _ body: (S3RemoteStorage) async throws -> Void
    ) async throws {
        let server = try await ScriptedHTTPServer.start { _ in
            ScriptedResponse(.ok, headers: [("content-type", "application/xml")], body: Data(xml.utf8))
        }
        let storage = try S3RemoteStorage(
            configuration: .init(
                endpoint: server.baseURL, bucket: "bucket",
                credentials: .static(accessKeyId: "AKIDEXAMPLE", secretAccessKey: "secret"), keyPrefix: "p/"))
        var failure: (any Error)?
        do { try await body(storage) } catch { failure = error }
        try await storage.shutdown()
        await server.stop()
        if let failure { throw failure }
    }

    @Test("keys deeper than the prefix are never listed, so gc can never be handed one")
    func deeperKeysAreLeftOut() async throws {
        let xml = """
            <ListBucketResult><IsTruncated>false</IsTruncated>\
            <Contents><Key>p/a.jpg</Key><Size>3</Size></Contents>\
            <Contents><Key>p/deep/x.jpg</Key><Size>4</Size></Contents>\
            <Contents><Key>other/b.jpg</Key><Size>5</Size></Contents>\
            </ListBucketResult>
            """
        try await Self.withListing(xml) { storage in
            let names = try await storage.allFiles().map(\.storedName)
            #expect(names == ["a.jpg"])
        }
    }

    @Test("a page that says there is more but gives no token is a typed error, not a loop")
    func truncatedWithoutToken() async throws {
        let xml = "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>"
        try await Self.withListing(xml) { storage in
            let error = await #expect(throws: AttachmentError.self) { _ = try await storage.allFiles() }
            #expect(error?.code == .remoteFailure)
        }
    }
}
