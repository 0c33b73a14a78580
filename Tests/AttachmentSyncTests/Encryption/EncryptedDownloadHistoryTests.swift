import AttachmentSyncTesting
import Crypto
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// Random histories of one encrypted download tried again and again: the wrapped adapter drops the connection
/// at any byte, starts the file over, serves another version of the object, or flips a byte, while the follower
/// decrypts and frees ciphertext at its own pace. Whatever happened before, a download that succeeds holds
/// exactly the content of the version it ended with (its digest that of the bytes on disk), leaves nothing
/// else behind, and a clean try after the history succeeds.
@Suite("Encrypted downloads over random histories of faults", .cleansUp)
struct EncryptedDownloadHistoryTests {
    /// What one try of the wrapped adapter does.
    struct TryPlan: Sendable, CustomStringConvertible {
        /// The version of the object served.
        var version: Int
        /// Sizes of the first writes (a few bytes of the header at a time), then of the others, cycled.
        var head: [Int]
        var chunks: [Int]
        /// Drops the connection once this many bytes of the file are written.
        var failAt: Int?
        /// Starts the file over (as after a changed validator) once this many bytes are written.
        var restartAt: Int?
        /// Flips the byte at this offset of the file when it is written.
        var flip: Int?
        /// After each write, waits (bounded) until the follower wrote content (lets it free ciphertext).
        var waitsForContent: Bool

        var description: String {
            "v\(version) chunks \(head)+\(chunks) fail \(failAt.map(String.init) ?? "-") restart "
                + "\(restartAt.map(String.init) ?? "-") flip \(flip.map(String.init) ?? "-") wait \(waitsForContent)"
        }
    }

    /// A ranged adapter serving the encrypted versions of one object, one ``TryPlan`` per download. Its
    /// validator is the version whose bytes the file it continues holds: another version starts the file over,
    /// as an HTTP adapter's `If-Match` does.
    struct FaultyDownload: RemoteStorageAdapter {
        let versions: [Data]
        let plan: TryPlan
        let ranged: Bool
        /// The version of the bytes the ciphertext file holds (the test keeps it between tries).
        let kept: LockedValue<Int?>
        let content: URL

        var supportsRangedDownloads: Bool { ranged }

        func downloadFile(
            attachment: AttachmentSync.Attachment, into destination: URL, from offset: Int64,
            progress: @escaping TransferProgressHandler
        ) async throws -> RemoteObjectInfo {
            let tap = DownloadTap.current
            var sealed = versions[plan.version]
            var length = 0
            if offset > 0 {
                guard ranged else { throw AttachmentError(code: .unsupported, message: "no ranged reads") }
                let current = (try? FileManager.default.attributesOfItem(atPath: destination.path)[.size] as? Int)
                if kept.withLock({ $0 }) == plan.version, current == Int(offset), Int(offset) <= sealed.count {
                    length = Int(offset)
                } else {
                    // Another version (or a file not as it was left): started over, as after a failed If-Match.
                    tap?.startedOver()
                }
            }
            if length == 0 { try Data().write(to: destination) }
            kept.withLock { $0 = plan.version }
            if let flip = plan.flip, flip < sealed.count { sealed[flip] ^= 0x20 }
            progress(TransferProgress(completedBytes: Int64(length), totalBytes: Int64(sealed.count)))
            let handle = try FileHandle(forWritingTo: destination)
            defer { try? handle.close() }
            var restarted = false
            var step = 0
            while length < sealed.count {
                try Task.checkCancellation()
                if let failAt = plan.failAt, length >= failAt {
                    throw AttachmentError(code: .remoteUnavailable, message: "the connection dropped (scripted)")
                }
                if let restartAt = plan.restartAt, length >= restartAt, !restarted {
                    restarted = true
                    tap?.startedOver()
                    try handle.truncate(atOffset: 0)
                    length = 0
                }
                let wanted = step < plan.head.count ? plan.head[step] : plan.chunks[step % plan.chunks.count]
                let count = min(wanted, sealed.count - length)
                step += 1
                try handle.seek(toOffset: UInt64(length))
                try handle.write(contentsOf: sealed[length..<(length + count)])
                length += count
                tap?.written(upTo: Int64(length))
                progress(TransferProgress(completedBytes: Int64(length), totalBytes: Int64(sealed.count)))
                if plan.waitsForContent, (length - count) / (256 << 10) != length / (256 << 10) {
                    // Bounded: the follower may be done, or not follow at all (a small file).
                    for _ in 0..<50 {
                        let written = (try? FileManager.default.attributesOfItem(atPath: content.path)[.size] as? Int)
                        if (written ?? 0) >= length / 2 { break }
                        try await Task.sleep(for: .milliseconds(1))
                    }
                }
            }
            return RemoteObjectInfo(size: Int64(length))
        }

        func uploadFile(data: Data, attachment: AttachmentSync.Attachment) async throws {
            throw AttachmentError(code: .unsupported, message: "download only")
        }

        func downloadFile(attachment: AttachmentSync.Attachment) async throws -> Data {
            throw AttachmentError(code: .unsupported, message: "into a file only")
        }

        func deleteFile(attachment: AttachmentSync.Attachment) async throws {}
    }

    /// Content of `size` bytes from `seed`, and its ciphertext as stored for attachment "photo".
    static func version(size: Int, seed: UInt64, segmentSize: Int) async throws -> (content: Data, sealed: Data) {
        var random = SplitMix64(seed: seed)
        let content = Data((0..<size).map { _ in UInt8(truncatingIfNeeded: random.next()) })
        let memory = InMemoryRemoteStorage()
        let attachment = EncryptedRemoteStorageTests.attachment("photo", content)
        try await EncryptedRemoteStorage(
            wrapping: memory, keys: EncryptedRemoteStorageTests.keys, segmentSize: segmentSize
        ).uploadFile(data: content, attachment: attachment)
        return (content, try #require(await memory.file(named: attachment.filename)))
    }

    /// One try of `download` into `target`, as the queue makes it (continuing its partial file from the size
    /// it has); returns its failure, having checked what a success holds (exactly `expected(version)`, its
    /// digest that of the bytes on disk, nothing else in `folder`). `damaged`: whether a flipped byte may be
    /// in what an earlier try kept, or in what this one was served.
    static func attempt(
        into target: URL, in folder: TemporaryDirectory, expected: Data, remoteKept: LockedValue<Int?>,
        damaged: Bool, log: [String], _ download: (Int64) async throws -> RemoteObjectInfo
    ) async throws -> AttachmentError? {
        let partial = (try? FileManager.default.attributesOfItem(atPath: target.path)[.size] as? Int) ?? 0
        do {
            let info = try await download(Int64(partial))
            let received = try Data(contentsOf: target)
            #expect(received == expected, "a success holds \(received.count) bytes, not \(expected.count): \(log)")
            #expect(info.writtenSize == Int64(received.count), "\(log)")
            #expect(info.writtenSHA256 == FileStreaming.sha256(received), "\(log)")
            let left = try FileManager.default.contentsOfDirectory(atPath: folder.path)
            #expect(left == [target.lastPathComponent], "nothing but the content is left: \(left), \(log)")
            // The queue moves a finished download away; the next try starts from nothing.
            try FileManager.default.removeItem(at: target)
            remoteKept.withLock { $0 = nil }
            return nil
        } catch let error as AttachmentError {
            #expect(
                [.remoteUnavailable, .integrityMismatch].contains(error.code), "\(error.code): \(error.message), \(log)"
            )
            if error.code == .integrityMismatch {
                #expect(damaged, "a refusal without damage delivered: \(error.message), \(log)")
            }
            return error
        }
    }

    /// Runs 2 to 6 random tries, then clean ones: the first may still meet damage a try before kept, the
    /// second must succeed. `attempt` makes one try of a plan (`damaged`: whether damage may be met).
    static func history<Plan: CustomStringConvertible>(
        _ random: inout SplitMix64, log: inout [String], plan: (inout SplitMix64, _ clean: Bool) -> Plan,
        flips: (Plan) -> Bool, attempt: (Plan, _ damaged: Bool, _ log: [String]) async throws -> AttachmentError?
    ) async throws {
        var damaged = false
        for _ in 0..<(2 + Int(random.next(below: 5))) {
            let next = plan(&random, false)
            log.append(next.description)
            let failure = try await attempt(next, damaged || flips(next), log)
            if flips(next) { damaged = true }
            if failure == nil || failure?.code == .integrityMismatch { damaged = false }
            log.append(failure.map { "→ \($0.code)" } ?? "→ ok")
        }
        let first = plan(&random, true)
        log.append("clean " + first.description)
        if let failure = try await attempt(first, damaged, log) {
            log.append("→ \(failure.code)")
            #expect(
                damaged && failure.code == .integrityMismatch,
                "a clean try failed with \(failure.code): \(failure.message), \(log)")
            let second = plan(&random, true)
            log.append("clean " + second.description)
            let again = try await attempt(second, false, log)
            #expect(again == nil, "a second clean try failed: \(again?.message ?? ""), \(log)")
        }
    }

    static func randomPlan(_ random: inout SplitMix64, versions: [Data], clean: Bool) -> TryPlan {
        let version = Int(random.next(below: UInt64(versions.count)))
        let size = versions[version].count
        func offset() -> Int { Int(random.next(below: UInt64(size))) }
        // Not in the header's key id (its length at byte 8, "k1" at 9 and 10): a changed id names a key that is
        // not here, and the ciphertext then waits for it (keyUnavailable), which is another test's subject.
        func flipOffset() -> Int {
            let chosen = offset()
            return (8..<11).contains(chosen) ? 11 : chosen
        }
        let chunkChoices = [4_096, 65_536, 65_552, 100_003, 262_144, 1 << 20]
        let chunks = (0..<(1 + Int(random.next(below: 3)))).map { _ in
            chunkChoices[Int(random.next(below: UInt64(chunkChoices.count)))]
        }
        return TryPlan(
            version: version, head: random.next(below: 2) == 0 ? [] : [1, 7, 300, 13], chunks: chunks,
            failAt: clean || random.next(below: 3) == 0 ? nil : offset(),
            restartAt: clean || random.next(below: 5) != 0 ? nil : offset(),
            flip: clean || random.next(below: 6) != 0 ? nil : flipOffset(),
            waitsForContent: random.next(below: 2) == 0)
    }

    @Test("every success is exactly one version's content, whatever the tries before it did", arguments: 0..<48)
    func randomHistory(seed: Int) async throws {
        var random = SplitMix64(seed: 0xE5C0_0000 &+ UInt64(seed))
        let folder = try TemporaryDirectory()
        let segmentSize = [1_024, 16_384, EncryptedFormat.defaultSegmentSize][Int(random.next(below: 3))]
        let sizes = [0, 1, 900_000, (1 << 20) - 1, 1 << 20, (1 << 20) + 65_536, 3_000_000]
        let size = sizes[Int(random.next(below: UInt64(sizes.count)))] + Int(random.next(below: 3))
        var contents: [Data] = []
        var versions: [Data] = []
        for index in 0..<(1 + Int(random.next(below: 2))) {
            let (content, sealed) = try await Self.version(
                size: size, seed: UInt64(seed) << 8 | UInt64(index), segmentSize: segmentSize)
            contents.append(content)
            versions.append(sealed)
        }
        let freeing: Int64 = [64 << 10, 200_000, 1 << 20, 64 << 20][Int(random.next(below: 4))]
        let ranged = random.next(below: 5) != 0
        let remoteKept = LockedValue<Int?>(nil)
        let target = URL(fileURLWithPath: folder.path(".attachment-sync-download-photo.jpg"))
        let attachment = AttachmentSync.Attachment(
            id: "photo", filename: "photo.jpg", state: .queuedDownload,
            size: random.next(below: 4) == 0 ? nil : Int64(size))
        var log: [String] = ["segment \(segmentSize), size \(size), freeing \(freeing), ranged \(ranged)"]

        try await Self.history(
            &random, log: &log, plan: { Self.randomPlan(&$0, versions: versions, clean: $1) },
            flips: { $0.flip != nil },
            attempt: { plan, damaged, log in
                let remote = EncryptedRemoteStorage(
                    wrapping: FaultyDownload(
                        versions: versions, plan: plan, ranged: ranged, kept: remoteKept, content: target),
                    keys: EncryptedRemoteStorageTests.keys, segmentSize: segmentSize, freeingInterval: freeing)
                return try await Self.attempt(
                    into: target, in: folder, expected: contents[plan.version], remoteKept: remoteKept,
                    damaged: damaged,
                    log: log
                ) { partial in
                    try await remote.downloadFile(attachment: attachment, into: target, from: partial) { _ in }
                }
            })
    }
}
