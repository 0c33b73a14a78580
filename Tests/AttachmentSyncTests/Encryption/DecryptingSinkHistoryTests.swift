import AttachmentSyncTesting
import Crypto
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// Random histories of one encrypted download through an adapter that hands its bytes to the download's sink
/// as the HTTP adapters do: in ranges of any size fetched at once (so segments arrive in pieces, out of
/// order, from two ranges), sometimes the whole object again over the ranges (a server ignoring them), the
/// connection dropped at any byte, a byte flipped, another version served. A failed try leaves what the sink
/// keeps, which the next try resumes through the follower. Whatever happened, a success holds exactly the
/// content of the version it ended with (its digest that of the bytes on disk) and nothing else is left.
@Suite("Encrypted downloads decrypted as they arrive, random histories", .cleansUp)
struct DecryptingSinkHistoryTests {
    /// What one try of the adapter does.
    struct TryPlan: Sendable, CustomStringConvertible {
        var version: Int
        /// The ranges' size (the whole object in one when it is larger), and how many go at once.
        var partSize: Int
        var concurrency: Int
        /// Sizes of the writes of a range, cycled.
        var chunks: [Int]
        /// Drops the connection once this many bytes were handed on (by all ranges together).
        var failAt: Int?
        /// Flips the byte at this offset of what is served.
        var flip: Int?
        /// Once this many ranges were asked for, the next is answered with the whole object.
        var wholeAfter: Int?

        var description: String {
            "v\(version) parts \(partSize)×\(concurrency) chunks \(chunks) fail \(failAt.map(String.init) ?? "-") "
                + "flip \(flip.map(String.init) ?? "-") whole after \(wholeAfter.map(String.init) ?? "-")"
        }
    }

    /// Which ranges a try claimed and finished, and the bytes it handed on.
    struct Ranges: Sendable {
        var next = 0
        var finished: Set<Int> = []
        var handed = 0
        var wholeServed = false
    }

    /// An adapter serving the encrypted versions of one object, one ``TryPlan`` per download; a sink takes
    /// its bytes when it accepts them, else it writes its file in order (reporting to the tap), as the HTTP
    /// transport does. It continues a file only when it holds the version served (`kept`), as `If-Match` does.
    struct SinkDownload: RemoteStorageAdapter, DownloadSinkAdapter {
        let versions: [Data]
        let plan: TryPlan
        let kept: LockedValue<Int?>

        var supportsRangedDownloads: Bool { true }

        func downloadFile(
            attachment: AttachmentSync.Attachment, into destination: URL, from offset: Int64,
            progress: @escaping TransferProgressHandler
        ) async throws -> RemoteObjectInfo {
            let plan = self.plan
            var served = versions[plan.version]
            if let flip = plan.flip, flip < served.count { served[flip] ^= 0x04 }
            let total = served.count
            let tap = DownloadTap.current
            var start = 0
            if offset > 0 {
                let current = (try? FileManager.default.attributesOfItem(atPath: destination.path)[.size] as? Int)
                if kept.withLock({ $0 }) == plan.version, current == Int(offset), Int(offset) <= total {
                    start = Int(offset)
                }
            }
            kept.withLock { $0 = plan.version }
            if start > 0, DownloadSinks.current?.accepts(total: Int64(total), from: Int64(start)) != true {
                return try await serial(served, from: start, into: destination, tap: tap, progress: progress)
            }
            // From byte 0: the tap hears of the new start, the sink is asked, then the file is cut.
            tap?.startedOver()
            guard let sink = DownloadSinks.current, sink.accepts(total: Int64(total), from: 0) else {
                try Data().write(to: destination)
                return try await serial(served, from: 0, into: destination, tap: tap, progress: progress)
            }
            try Data().write(to: destination)
            progress(TransferProgress(completedBytes: 0, totalBytes: Int64(total)))
            let object = served
            let ranges = LockedValue(Ranges())
            let partSize = plan.partSize
            let parts = max(1, (total + partSize - 1) / partSize)
            /// Hands `bytes` on at `position`, dropping the connection where the plan says.
            @Sendable func hand(_ bytes: Data, at position: Int) async throws {
                let dropped = ranges.withLock { ranges -> Bool in
                    if let failAt = plan.failAt, ranges.handed + bytes.count > failAt { return true }
                    ranges.handed += bytes.count
                    return false
                }
                if dropped { throw AttachmentError(code: .remoteUnavailable, message: "the connection dropped") }
                try await sink.write(bytes, at: Int64(position))
                await Task.yield()
            }
            @Sendable func stream(from first: Int, to end: Int) async throws {
                var position = first
                var step = 0
                while position < end {
                    let count = min(plan.chunks[step % plan.chunks.count], end - position)
                    step += 1
                    try await hand(object[position..<(position + count)], at: position)
                    position += count
                }
            }
            do {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<min(plan.concurrency, parts) {
                        group.addTask {
                            while let part = ranges.withLock({ ranges -> Int? in
                                guard ranges.next < parts, !ranges.wholeServed else { return nil }
                                defer { ranges.next += 1 }
                                if let wholeAfter = plan.wholeAfter, ranges.next > 0, ranges.next >= wholeAfter {
                                    ranges.wholeServed = true
                                    return -1
                                }
                                return ranges.next
                            }) {
                                if part < 0 {
                                    // The whole object again from byte 0, over the ranges still going.
                                    try await stream(from: 0, to: total)
                                    ranges.withLock { $0.finished.formUnion(0..<parts) }
                                    return
                                }
                                try await stream(from: part * partSize, to: min(total, (part + 1) * partSize))
                                ranges.withLock { _ = $0.finished.insert(part) }
                            }
                        }
                    }
                    while try await group.next() != nil {}
                }
            } catch {
                // As the transport: the file is cut to what the sink says it holds.
                let contiguous = ranges.withLock { ranges -> Int in
                    var part = 0
                    while ranges.finished.contains(part) { part += 1 }
                    return min(total, part * partSize)
                }
                let kept = sink.keep(upTo: Int64(contiguous))
                let handle = try FileHandle(forWritingTo: destination)
                try handle.truncate(atOffset: UInt64(kept))
                try handle.close()
                throw error
            }
            return RemoteObjectInfo(size: Int64(total))
        }

        /// Writes `served` from `start` into the file in order, reporting to the tap.
        private func serial(
            _ served: Data, from start: Int, into destination: URL, tap: DownloadTap?,
            progress: TransferProgressHandler
        ) async throws -> RemoteObjectInfo {
            progress(TransferProgress(completedBytes: Int64(start), totalBytes: Int64(served.count)))
            let handle = try FileHandle(forWritingTo: destination)
            defer { try? handle.close() }
            try handle.truncate(atOffset: UInt64(start))
            var length = start
            var step = 0
            while length < served.count {
                if let failAt = plan.failAt, length - start >= failAt {
                    throw AttachmentError(code: .remoteUnavailable, message: "the connection dropped")
                }
                let count = min(plan.chunks[step % plan.chunks.count], served.count - length)
                step += 1
                try handle.write(contentsOf: served[length..<(length + count)])
                length += count
                tap?.written(upTo: Int64(length))
                progress(TransferProgress(completedBytes: Int64(length), totalBytes: Int64(served.count)))
                await Task.yield()
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

    static func randomPlan(_ random: inout SplitMix64, versions: [Data], clean: Bool) -> TryPlan {
        let version = Int(random.next(below: UInt64(versions.count)))
        let size = versions[version].count
        let chunkChoices = [1_000, 4_096, 16_384, 65_536, 65_552, 100_003, 1 << 20]
        let partChoices = [65_536, 100_003, 262_144, 1 << 20, Int.max / 2]
        // Not in the header's key id (its length at byte 8, "k1" at 9 and 10): another id names a key that is
        // not here, and the ciphertext then waits for it, which is another test's subject.
        var flip = Int(random.next(below: UInt64(max(1, size))))
        if (8..<11).contains(flip) { flip = 11 }
        return TryPlan(
            version: version, partSize: partChoices[Int(random.next(below: UInt64(partChoices.count)))],
            concurrency: 1 + Int(random.next(below: 4)),
            chunks: (0..<(1 + Int(random.next(below: 3)))).map { _ in
                chunkChoices[Int(random.next(below: UInt64(chunkChoices.count)))]
            },
            failAt: clean || random.next(below: 3) == 0 ? nil : Int(random.next(below: UInt64(max(1, size)))),
            flip: clean || random.next(below: 6) != 0 ? nil : flip,
            wholeAfter: random.next(below: 4) == 0 ? 1 + Int(random.next(below: 4)) : nil)
    }

    @Test("every success is exactly one version's content, whatever the tries before it did", arguments: 0..<40)
    func randomHistory(seed: Int) async throws {
        var random = SplitMix64(seed: 0x51CC_0000 &+ UInt64(seed))
        let folder = try TemporaryDirectory()
        let segmentSize = [1_024, 16_384, EncryptedFormat.defaultSegmentSize][Int(random.next(below: 3))]
        let sizes = [1_000_000, 1 << 20, (1 << 20) + 65_536, 2_500_000]
        let size = sizes[Int(random.next(below: UInt64(sizes.count)))] + Int(random.next(below: 3))
        var contents: [Data] = []
        var versions: [Data] = []
        for index in 0..<(1 + Int(random.next(below: 2))) {
            let (content, sealed) = try await EncryptedDownloadHistoryTests.version(
                size: size, seed: UInt64(seed) << 8 | UInt64(index) | 0x10_0000, segmentSize: segmentSize)
            contents.append(content)
            versions.append(sealed)
        }
        let freeing: Int64 = [64 << 10, 1 << 20, 64 << 20][Int(random.next(below: 3))]
        let remoteKept = LockedValue<Int?>(nil)
        let target = URL(fileURLWithPath: folder.path(".attachment-sync-download-photo.jpg"))
        let attachment = AttachmentSync.Attachment(
            id: "photo", filename: "photo.jpg", state: .queuedDownload,
            size: random.next(below: 4) == 0 ? nil : Int64(size))
        var log: [String] = ["segment \(segmentSize), size \(size), freeing \(freeing)"]

        try await EncryptedDownloadHistoryTests.history(
            &random, log: &log, plan: { Self.randomPlan(&$0, versions: versions, clean: $1) },
            flips: { $0.flip != nil },
            attempt: { plan, damaged, log in
                let remote = EncryptedRemoteStorage(
                    wrapping: SinkDownload(versions: versions, plan: plan, kept: remoteKept),
                    keys: EncryptedRemoteStorageTests.keys, segmentSize: segmentSize, freeingInterval: freeing)
                return try await EncryptedDownloadHistoryTests.attempt(
                    into: target, in: folder, expected: contents[plan.version], remoteKept: remoteKept,
                    damaged: damaged,
                    log: log
                ) { partial in
                    try await remote.downloadFile(attachment: attachment, into: target, from: partial) { _ in }
                }
            })
    }
}
