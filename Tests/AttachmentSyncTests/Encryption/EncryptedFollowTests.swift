import AttachmentSyncTesting
import Crypto
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// A large encrypted download is decrypted while the wrapped adapter writes its ciphertext (the adapter
/// reports through `DownloadTap`): the content appears before the transfer ends, a file the adapter starts
/// over yields exactly the version it ends with, and damage or a missing key is reported as without it.
@Suite("Encrypted downloads decrypted as they arrive", .cleansUp)
struct EncryptedFollowTests {
    /// A remote whose download writes the ciphertext in scripted steps, reporting each to the tap as the HTTP
    /// adapters do.
    struct ScriptedDownload: RemoteStorageAdapter {
        enum Step: Sendable {
            /// Appends bytes to the file.
            case append(Data)
            /// Creates the file again with these bytes (the object changed; the download starts over).
            case restart(Data)
            /// Waits (bounded) until the content file holds at least this many bytes.
            case waitForContent(atLeast: Int)
            /// Reports the object's size, as an HTTP adapter does from the response's `Content-Length`.
            case report(total: Int64)
            /// Waits (bounded) until the file takes less disk space than this, then records what it takes (in
            /// ``allocated``).
            case waitForFreed(below: Int64)
            /// Fails as a dropped connection does.
            case fail
        }

        let steps: [Step]
        /// Whether a download continues the file from the offset asked for (appending what the steps give).
        var ranged = false
        /// Whether the tap let the adapter skip hashing, and the most content seen before the last step.
        let skippedDigest = LockedValue<Bool?>(nil)
        let contentSeen = LockedValue<Int>(0)
        /// The offset each download was asked to continue from, and the disk space each `measure` found.
        let offsets = LockedValue<[Int64]>([])
        let allocated = LockedValue<[Int64]>([])

        var supportsRangedDownloads: Bool { ranged }

        func downloadFile(
            attachment: AttachmentSync.Attachment, into destination: URL, from offset: Int64,
            progress: @escaping TransferProgressHandler
        ) async throws -> RemoteObjectInfo {
            let tap = DownloadTap.current
            skippedDigest.withLock { $0 = tap?.skipsDigest }
            // The content file: the queue's partial file, whose resume name holds the ciphertext.
            let content = destination.deletingLastPathComponent().appendingPathComponent(
                String(destination.lastPathComponent.dropFirst(".attachment-sync-etag-".count)))
            offsets.withLock { $0.append(offset) }
            var length: Int64 = 0
            if offset > 0 {
                guard ranged else { throw AttachmentError(code: .unsupported, message: "no ranged reads") }
                length = offset
            } else {
                try Data().write(to: destination)
            }
            for step in steps {
                // As the HTTP adapters' body streams do.
                try Task.checkCancellation()
                switch step {
                case .report(let total):
                    progress(TransferProgress(completedBytes: length, totalBytes: total))
                case .append(let bytes):
                    let handle = try FileHandle(forWritingTo: destination)
                    try handle.seek(toOffset: UInt64(length))
                    try handle.write(contentsOf: bytes)
                    try handle.close()
                    length += Int64(bytes.count)
                    tap?.written(upTo: length)
                case .restart(let bytes):
                    // As the HTTP adapters do: the tap hears of it before the file is cut.
                    tap?.startedOver()
                    try bytes.write(to: destination)
                    length = Int64(bytes.count)
                    tap?.written(upTo: length)
                case .waitForFreed(let limit):
                    var taken = EncryptedFollowTests.allocatedBytes(destination.path)
                    for _ in 0..<3_000 where taken >= limit {
                        try await Task.sleep(for: .milliseconds(10))
                        taken = EncryptedFollowTests.allocatedBytes(destination.path)
                    }
                    allocated.withLock { $0.append(taken) }
                case .fail:
                    throw AttachmentError(code: .remoteUnavailable, message: "the connection dropped (scripted)")
                case .waitForContent(let count):
                    for _ in 0..<3_000 {
                        let seen = (try? Data(contentsOf: content).count) ?? 0
                        contentSeen.withLock { $0 = max($0, seen) }
                        if seen >= count { break }
                        try await Task.sleep(for: .milliseconds(10))
                    }
                }
            }
            return RemoteObjectInfo(size: length)
        }

        func uploadFile(data: Data, attachment: AttachmentSync.Attachment) async throws {
            throw AttachmentError(code: .unsupported, message: "download only")
        }

        func downloadFile(attachment: AttachmentSync.Attachment) async throws -> Data {
            throw AttachmentError(code: .unsupported, message: "into a file only")
        }

        func deleteFile(attachment: AttachmentSync.Attachment) async throws {}
    }

    static let size = 2 << 20

    /// The ciphertext `EncryptedRemoteStorage` stores for content `seed` of attachment `id`.
    static func ciphertext(_ id: String, seed: UInt64, keys: StaticKeyProvider = EncryptedRemoteStorageTests.keys)
        async throws -> (content: Data, sealed: Data)
    {
        var random = SplitMix64(seed: seed)
        let content = Data((0..<size).map { _ in UInt8(truncatingIfNeeded: random.next()) })
        let memory = InMemoryRemoteStorage()
        let attachment = EncryptedRemoteStorageTests.attachment(id, content)
        try await EncryptedRemoteStorage(wrapping: memory, keys: keys).uploadFile(data: content, attachment: attachment)
        return (content, try #require(await memory.file(named: attachment.filename)))
    }

    static func download(
        _ base: ScriptedDownload, in folder: TemporaryDirectory,
        keys: StaticKeyProvider = EncryptedRemoteStorageTests.keys, freeingInterval: Int64 = 64 << 20,
        from offset: Int64 = 0
    ) async throws -> (info: RemoteObjectInfo, content: URL) {
        let remote = EncryptedRemoteStorage(
            wrapping: base, keys: keys, segmentSize: EncryptedFormat.defaultSegmentSize,
            freeingInterval: freeingInterval)
        let attachment = AttachmentSync.Attachment(
            id: "photo", filename: "photo.jpg", state: .queuedDownload, size: Int64(size))
        let target = URL(fileURLWithPath: folder.path(".attachment-sync-download-photo.jpg"))
        return (try await remote.downloadFile(attachment: attachment, into: target, from: offset) { _ in }, target)
    }

    /// The disk space the file at `path` takes (its blocks, not its size).
    static func allocatedBytes(_ path: String) -> Int64 {
        var status = stat()
        guard stat(path, &status) == 0 else { return -1 }
        return Int64(status.st_blocks) * 512
    }

    /// Whether the file system of `folder` frees a punched range and reports the hole.
    static func punchesHoles(in folder: TemporaryDirectory) throws -> Bool {
        let path = folder.path("probe")
        try Data(repeating: 7, count: 256 << 10).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        return FileHoles.punch(handle.fileDescriptor, offset: 64 << 10, length: 128 << 10)
            && FileHoles.dataStart(handle.fileDescriptor, from: 64 << 10) == 192 << 10
            && allocatedBytes(path) <= 128 << 10
    }

    @Test("the content is written while the ciphertext still arrives; the wrapped adapter skips its hash")
    func decryptsWhileDownloading() async throws {
        let folder = try TemporaryDirectory()
        let (content, sealed) = try await Self.ciphertext("photo", seed: 1)
        let half = sealed.count / 2
        let base = ScriptedDownload(steps: [
            .append(sealed.prefix(half)), .waitForContent(atLeast: Self.size / 4), .append(sealed.dropFirst(half)),
        ])
        let (info, target) = try await Self.download(base, in: folder)
        #expect(base.contentSeen.withLock { $0 } >= Self.size / 4, "content written before the transfer ended")
        #expect(base.skippedDigest.withLock { $0 } == true)
        #expect(try Data(contentsOf: target) == content)
        #expect(info.writtenSize == Int64(content.count))
        #expect(info.writtenSHA256 == FileStreaming.sha256(content))
        let left = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        #expect(left == [target.lastPathComponent], "the ciphertext is removed: \(left)")
    }

    @Test("a download the adapter starts over with another version gives exactly that version, never a splice")
    func startedOverGivesTheLastVersion() async throws {
        let folder = try TemporaryDirectory()
        let (_, first) = try await Self.ciphertext("photo", seed: 2)
        let (second, sealed) = try await Self.ciphertext("photo", seed: 3)
        let base = ScriptedDownload(steps: [
            .append(first.prefix(first.count * 3 / 4)), .waitForContent(atLeast: Self.size / 2),
            .restart(sealed.prefix(1_000)), .append(sealed.dropFirst(1_000)),
        ])
        let (info, target) = try await Self.download(base, in: folder)
        #expect(try Data(contentsOf: target) == second)
        #expect(info.writtenSHA256 == FileStreaming.sha256(second))
    }

    @Test("a damaged end is refused with nothing left at the destination; a missing key keeps the ciphertext")
    func damageAndMissingKey() async throws {
        let folder = try TemporaryDirectory()
        let (_, sealed) = try await Self.ciphertext("photo", seed: 4)
        var damaged = sealed
        damaged[damaged.count - 5] ^= 0x01
        let base = ScriptedDownload(steps: [
            .append(damaged.prefix(damaged.count - 100)), .waitForContent(atLeast: Self.size / 2),
            .append(damaged.suffix(100)),
        ])
        await #expect(throws: AttachmentError.self) { _ = try await Self.download(base, in: folder) }
        do {
            _ = try await Self.download(base, in: folder)
        } catch let error as AttachmentError {
            #expect(error.code == .integrityMismatch)
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).isEmpty)

        let keyless = StaticKeyProvider(keys: [:], current: "k1")
        let whole = ScriptedDownload(steps: [.append(sealed)])
        do {
            _ = try await Self.download(whole, in: folder, keys: keyless)
            Issue.record("decrypted without the key")
        } catch let error as AttachmentError {
            #expect(error.code == .keyUnavailable)
        }
        let left = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        #expect(left == [".attachment-sync-etag-.attachment-sync-download-photo.jpg"], "only the ciphertext: \(left)")
    }

    @Test("an object larger than any encrypted file of the row's size is stopped as soon as its size shows")
    func oversizedObjectIsStopped() async throws {
        let folder = try TemporaryDirectory()
        let (_, sealed) = try await Self.ciphertext("photo", seed: 5)
        let base = ScriptedDownload(steps: [
            .report(total: 50 << 30), .append(sealed.prefix(100_000)), .append(sealed.dropFirst(100_000)),
        ])
        do {
            _ = try await Self.download(base, in: folder)
            Issue.record("a 50 GiB object for a 2 MiB attachment was downloaded")
        } catch let error as AttachmentError {
            #expect(error.code == .integrityMismatch)
            #expect(error.message.contains("53687091200 bytes"), "names the size: \(error.message)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).isEmpty, "nothing kept")
        // Within the bound, the same object is fine.
        let fine = ScriptedDownload(steps: [.report(total: Int64(sealed.count)), .append(sealed)])
        _ = try await Self.download(fine, in: folder)
    }

    @Test(
        "a large download frees the ciphertext it decrypted, and the next try decrypts on from the content kept",
        arguments: [false, true])
    func freesCiphertextAndResumesFromContent(tamperingKeptContent: Bool) async throws {
        let folder = try TemporaryDirectory()
        try #require(try Self.punchesHoles(in: folder), "the test folder's file system punches holes")
        let (content, sealed) = try await Self.ciphertext("photo", seed: 6)
        let cut = sealed.count * 3 / 4
        var first = ScriptedDownload(steps: [
            .append(sealed.prefix(cut)), .waitForFreed(below: Int64(cut / 4)), .fail,
        ])
        first.ranged = true
        do {
            _ = try await Self.download(first, in: folder, freeingInterval: 256 << 10)
            Issue.record("the scripted failure did not fail the download")
        } catch let error as AttachmentError {
            #expect(error.code == .remoteUnavailable)
        }
        let taken = try #require(first.allocated.withLock { $0.first })
        #expect(taken < Int64(cut / 4), "\(taken) bytes of disk for \(cut) bytes of ciphertext")
        let target = URL(fileURLWithPath: folder.path(".attachment-sync-download-photo.jpg"))
        let sealedPath = folder.path(".attachment-sync-etag-.attachment-sync-download-photo.jpg")
        var kept = try Data(contentsOf: target)
        #expect(kept.count >= cut - (cut / 4), "the content decrypted is kept: \(kept.count) bytes")
        #expect(kept == content.prefix(kept.count))
        #expect(try FileManager.default.attributesOfItem(atPath: sealedPath)[.size] as? Int == cut)
        if tamperingKeptContent {
            kept[1_000] ^= 1
            try kept.write(to: target)
        }

        var second = ScriptedDownload(steps: [.append(sealed.dropFirst(cut))])
        second.ranged = true
        let (info, _) = try await Self.download(second, in: folder, freeingInterval: 256 << 10, from: Int64(kept.count))
        #expect(second.offsets.withLock { $0 } == [Int64(cut)], "only the rest of the ciphertext is fetched")
        let received = try Data(contentsOf: target)
        #expect(info.writtenSize == Int64(received.count))
        // The digest is of the bytes on disk, the kept ones read again: a change to them shows.
        #expect(info.writtenSHA256 == FileStreaming.sha256(received))
        if tamperingKeptContent {
            #expect(received != content, "the content kept is not decrypted again")
            #expect(info.writtenSHA256 != FileStreaming.sha256(content))
        } else {
            #expect(received == content)
        }
        let left = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        #expect(left == [target.lastPathComponent], "the ciphertext is removed: \(left)")
    }

    @Test("a partial file is content only when the ciphertext kept beside it was freed; otherwise it is written again")
    func partialFileIsNotTrustedWithoutFreedCiphertext() async throws {
        let folder = try TemporaryDirectory()
        let (content, sealed) = try await Self.ciphertext("photo", seed: 7)
        let target = URL(fileURLWithPath: folder.path(".attachment-sync-download-photo.jpg"))
        let sealedURL = URL(fileURLWithPath: folder.path(".attachment-sync-etag-.attachment-sync-download-photo.jpg"))
        // Whole ciphertext kept (nothing freed) beside a partial file of other bytes.
        try sealed.prefix(1_500_000).write(to: sealedURL)
        try Data(repeating: 0xEE, count: 700_000).write(to: target)
        var rest = ScriptedDownload(steps: [.append(sealed.dropFirst(1_500_000))])
        rest.ranged = true
        let (info, _) = try await Self.download(rest, in: folder, from: 700_000)
        #expect(rest.offsets.withLock { $0 } == [1_500_000])
        #expect(try Data(contentsOf: target) == content)
        #expect(info.writtenSHA256 == FileStreaming.sha256(content))

        // Freed ciphertext without the content it was decrypted into: the download starts over.
        try #require(try Self.punchesHoles(in: folder), "the test folder's file system punches holes")
        var first = ScriptedDownload(steps: [
            .append(sealed.prefix(1_500_000)), .waitForFreed(below: 500_000), .fail,
        ])
        first.ranged = true
        await #expect(throws: AttachmentError.self) {
            _ = try await Self.download(first, in: folder, freeingInterval: 256 << 10)
        }
        try FileManager.default.removeItem(at: target)
        var again = ScriptedDownload(steps: [.append(sealed)])
        again.ranged = true
        _ = try await Self.download(again, in: folder, freeingInterval: 256 << 10)
        #expect(again.offsets.withLock { $0 } == [0], "the freed ciphertext is not resumed")
        #expect(try Data(contentsOf: target) == content)
    }

    @Test("a download started over after ciphertext was freed gives exactly the version it ends with")
    func startedOverAfterFreeing() async throws {
        let folder = try TemporaryDirectory()
        try #require(try Self.punchesHoles(in: folder), "the test folder's file system punches holes")
        let (_, first) = try await Self.ciphertext("photo", seed: 8)
        let (second, sealed) = try await Self.ciphertext("photo", seed: 9)
        let base = ScriptedDownload(steps: [
            .append(first.prefix(first.count * 3 / 4)), .waitForFreed(below: Int64(first.count / 4)),
            .restart(sealed.prefix(1_000)), .append(sealed.dropFirst(1_000)),
        ])
        let (info, target) = try await Self.download(base, in: folder, freeingInterval: 256 << 10)
        #expect(try Data(contentsOf: target) == second)
        #expect(info.writtenSHA256 == FileStreaming.sha256(second))
    }

    @Test(
        "content kept under a key this device no longer has: a rotated object is downloaded; an unchanged one waits for the key with everything kept"
    )
    func keptContentUnderARetiredKey() async throws {
        let folder = try TemporaryDirectory()
        try #require(try Self.punchesHoles(in: folder), "the test folder's file system punches holes")
        let both = StaticKeyProvider(keys: EncryptedFormatTests.keys, current: "k1")
        let (content, underK1) = try await Self.ciphertext("photo", seed: 10, keys: both)
        let (_, underK2) = try await Self.ciphertext(
            "photo", seed: 10, keys: StaticKeyProvider(keys: EncryptedFormatTests.keys, current: "k2"))
        let k2Only = StaticKeyProvider(keys: ["k2": try #require(EncryptedFormatTests.keys["k2"])], current: "k2")
        let target = URL(fileURLWithPath: folder.path(".attachment-sync-download-photo.jpg"))
        let cut = underK1.count * 3 / 4
        func interrupted() async throws {
            var first = ScriptedDownload(steps: [
                .append(underK1.prefix(cut)), .waitForFreed(below: Int64(cut / 4)), .fail,
            ])
            first.ranged = true
            await #expect(throws: AttachmentError.self) {
                _ = try await Self.download(first, in: folder, keys: both, freeingInterval: 256 << 10)
            }
            #expect(try Data(contentsOf: target).count >= cut / 2, "content kept, its ciphertext freed")
        }

        // The object was re-encrypted under k2 and k1 retired here: the adapter finds it changed and starts over.
        try await interrupted()
        var rotated = ScriptedDownload(steps: [.restart(underK2.prefix(1_000)), .append(underK2.dropFirst(1_000))])
        rotated.ranged = true
        let kept = try Data(contentsOf: target).count
        let (info, _) = try await Self.download(
            rotated, in: folder, keys: k2Only, freeingInterval: 256 << 10, from: Int64(kept))
        #expect(try Data(contentsOf: target) == content)
        #expect(info.writtenSHA256 == FileStreaming.sha256(content))
        try FileManager.default.removeItem(at: target)

        // The object did not change: the key is missing, and the content kept waits for it.
        try await interrupted()
        let keptContent = try Data(contentsOf: target)
        var unchanged = ScriptedDownload(steps: [.append(underK1.dropFirst(cut))])
        unchanged.ranged = true
        do {
            _ = try await Self.download(
                unchanged, in: folder, keys: k2Only, freeingInterval: 256 << 10, from: Int64(keptContent.count))
            Issue.record("decrypted without the key")
        } catch let error as AttachmentError {
            #expect(error.code == .keyUnavailable, "\(error.message)")
        }
        #expect(try Data(contentsOf: target).prefix(keptContent.count) == keptContent, "the content kept stays")
        // With the key back, it decrypts on from the content kept, fetching nothing more.
        var rest = ScriptedDownload(steps: [])
        rest.ranged = true
        let (again, _) = try await Self.download(rest, in: folder, keys: both, freeingInterval: 256 << 10)
        #expect(rest.offsets.withLock { $0 } == [Int64(underK1.count)], "nothing fetched again")
        #expect(try Data(contentsOf: target) == content)
        #expect(again.writtenSHA256 == FileStreaming.sha256(content))
    }
}
