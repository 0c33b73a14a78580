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
        }

        let steps: [Step]
        /// Whether the tap let the adapter skip hashing, and the most content seen before the last step.
        let skippedDigest = LockedValue<Bool?>(nil)
        let contentSeen = LockedValue<Int>(0)

        func downloadFile(
            attachment: AttachmentSync.Attachment, into destination: URL, from offset: Int64,
            progress: @escaping TransferProgressHandler
        ) async throws -> RemoteObjectInfo {
            let tap = DownloadTap.current
            skippedDigest.withLock { $0 = tap?.skipsDigest }
            // The content file: the queue's partial file, whose resume name holds the ciphertext.
            let content = destination.deletingLastPathComponent().appendingPathComponent(
                String(destination.lastPathComponent.dropFirst(".attachment-sync-etag-".count)))
            var file = Data()
            for step in steps {
                // As the HTTP adapters' body streams do.
                try Task.checkCancellation()
                switch step {
                case .report(let total):
                    progress(TransferProgress(completedBytes: Int64(file.count), totalBytes: total))
                case .append(let bytes):
                    file += bytes
                    try file.write(to: destination)
                    tap?.written(upTo: Int64(file.count))
                case .restart(let bytes):
                    file = bytes
                    try file.write(to: destination)
                    tap?.startedOver()
                    tap?.written(upTo: Int64(file.count))
                case .waitForContent(let count):
                    for _ in 0..<3_000 {
                        let seen = (try? Data(contentsOf: content).count) ?? 0
                        contentSeen.withLock { $0 = max($0, seen) }
                        if seen >= count { break }
                        try await Task.sleep(for: .milliseconds(10))
                    }
                }
            }
            return RemoteObjectInfo(size: Int64(file.count))
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
        keys: StaticKeyProvider = EncryptedRemoteStorageTests.keys
    ) async throws -> (info: RemoteObjectInfo, content: URL) {
        let remote = EncryptedRemoteStorage(wrapping: base, keys: keys)
        let attachment = AttachmentSync.Attachment(
            id: "photo", filename: "photo.jpg", state: .queuedDownload, size: Int64(size))
        let target = URL(fileURLWithPath: folder.path(".attachment-sync-download-photo.jpg"))
        return (try await remote.downloadFile(attachment: attachment, into: target, from: 0) { _ in }, target)
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
}
