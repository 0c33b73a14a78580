import AttachmentSync
import AttachmentSyncTesting
import Crypto
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync
@testable import AttachmentSyncHTTP

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A large encrypted download through the HTTP transport is decrypted as the bytes arrive: its ciphertext
/// never takes the disk, and when the connection drops, the content decrypted so far stays for the next try,
/// which asks the server only for the rest.
@Suite("Encrypted downloads decrypted as they arrive over HTTP (scripted, on 127.0.0.1)")
struct EncryptedDownloadSinkTests {
    /// The disk a file takes (its allocated blocks, not its size: a hole takes none).
    static func allocated(_ url: URL) -> Int64 {
        var status = stat()
        guard stat(url.path, &status) == 0 else { return 0 }
        return Int64(status.st_blocks) * 512
    }

    /// Runs `body` with an encrypted adapter over the scripted server serving `content`'s ciphertext, the
    /// partial download's name and its ciphertext file's name.
    static func with(
        _ content: Data, transport: TestTransport, splits: Bool,
        _ body: (EncryptedRemoteStorage, ServedObject, ScriptedHTTPServer, URL, URL, URL) async throws -> Void
    ) async throws {
        let object = ServedObject(try await EncryptedHostileServerTests.ciphertext(content))
        let splitting: @Sendable (inout HTTPRemoteStorage.Configuration) -> Void = { configuration in
            if splits {
                configuration.parallelDownloadThreshold = 2 << 20
                configuration.downloadPartSize = 1 << 20
                configuration.downloadConcurrency = 2
            }
        }
        try await HostileServerTests.with(object, transport: transport, configure: splitting) {
            storage, server, directory in
            let destination = directory.appendingPathComponent(".attachment-sync-download-photo.jpg")
            let sealed = directory.appendingPathComponent(
                FileName.resumeValidatorName(for: destination.lastPathComponent))
            try await body(
                EncryptedRemoteStorage(wrapping: storage, keys: EncryptedHostileServerTests.keys), object, server,
                directory, destination, sealed)
        }
    }

    static func size(_ url: URL) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: url.path)[.size]) as? Int) ?? 0
    }

    @Test(
        "a dropped download keeps only content, as a prefix of whole segments, and the next try fetches the rest",
        arguments: [TestTransport.asyncHTTPClient, .urlSession], [false, true])
    func dropped(transport: TestTransport, splits: Bool) async throws {
        let content = testBytes(count: 3_000_000, seed: 91)
        try await Self.with(content, transport: transport, splits: splits) {
            remote, object, server, directory, destination, sealed in
            let attachment = AttachmentSync.Attachment(
                id: "photo", filename: "photo.jpg", state: .queuedDownload, size: Int64(content.count))
            // Split: the first response streams part 0 (the first 1 MiB) and drops, and so do the ranges after it.
            object.change { $0.closeAfter = splits ? 900_000 : 2_000_000 }
            await #expect(throws: AttachmentError.self) {
                try await remote.downloadFile(attachment: attachment, into: destination, from: 0) { _ in }
            }
            // How much came before the drop is the client's business; what stays is content the same as the
            // content's start, whole segments of it, and at most a segment of ciphertext on disk.
            let kept = try Data(contentsOf: destination)
            #expect(kept.count % EncryptedFormat.defaultSegmentSize == 0)
            #expect(kept == content.prefix(kept.count))
            #expect(Self.allocated(sealed) <= 2 * 65_536, "\(Self.allocated(sealed)) bytes of ciphertext on disk")
            let sealedSize = Self.size(sealed)
            #expect(sealedSize == 0 || sealedSize > kept.count)

            object.change { $0.closeAfter = nil }
            let before = server.requests.count
            _ = try await remote.downloadFile(
                attachment: attachment, into: destination, from: Int64(Self.size(destination))
            ) { _ in }
            #expect(try Data(contentsOf: destination) == content)
            let first = server.requests.dropFirst(before).first { $0.method == .GET }
            #expect(first?.header("range") == (sealedSize > 0 ? "bytes=\(sealedSize)-" : nil))
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: directory.path) == [destination.lastPathComponent])
        }
    }

    @Test(
        "a download stopped after 2 MB keeps the content of every whole segment that came, and resumes after it",
        arguments: [TestTransport.asyncHTTPClient, .urlSession])
    func stopped(transport: TestTransport) async throws {
        let content = testBytes(count: 3_000_000, seed: 92)
        try await Self.with(content, transport: transport, splits: false) {
            remote, object, server, directory, destination, sealed in
            let attachment = AttachmentSync.Attachment(
                id: "photo", filename: "photo.jpg", state: .queuedDownload, size: Int64(content.count))
            // The server sends 2,000,000 bytes and waits: the header (50 bytes) and 30 whole segments came.
            object.change { $0.holdAfter = 2_000_000 }
            let whole = EncryptedFormat.defaultSegmentSize + EncryptedFormat.tagSize
            let segments = (2_000_000 - 50) / whole
            let download = Task {
                try await remote.downloadFile(attachment: attachment, into: destination, from: 0) { _ in }
            }
            // Bounded: until the content of those segments is written (the download then waits for bytes).
            for _ in 0..<2_000 where Self.size(destination) < segments * EncryptedFormat.defaultSegmentSize {
                try await Task.sleep(for: .milliseconds(5))
            }
            download.cancel()
            _ = await download.result
            let kept = try Data(contentsOf: destination)
            #expect(kept == content.prefix(segments * EncryptedFormat.defaultSegmentSize))
            #expect(Self.size(sealed) == 50 + segments * whole)
            #expect(Self.allocated(sealed) <= 2 * 65_536, "\(Self.allocated(sealed)) bytes of ciphertext on disk")

            object.change { $0.holdAfter = nil }
            let before = server.requests.count
            let info = try await remote.downloadFile(
                attachment: attachment, into: destination, from: Int64(kept.count)
            ) { _ in }
            #expect(try Data(contentsOf: destination) == content)
            #expect(info.writtenSHA256 == FileStreaming.sha256(content))
            let first = server.requests.dropFirst(before).first { $0.method == .GET }
            #expect(first?.header("range") == "bytes=\(50 + segments * whole)-")
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: directory.path) == [destination.lastPathComponent])
        }
    }
}
