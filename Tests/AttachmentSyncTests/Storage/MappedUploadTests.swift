import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Where the bytes of a `Data` live, read from the kernel's own list of this process's mappings
/// (`/proc/self/maps`, Linux): in a mapping of a file (by its inode), or elsewhere (the heap, anonymous
/// memory). `nil` where there is no such list.
enum MemoryOrigin: Equatable, Sendable {
    case file(inode: UInt64)
    case anonymous

    static var isObservable: Bool { FileManager.default.isReadableFile(atPath: "/proc/self/maps") }

    /// The kernel writes the list as it is read, a page at a time: with other threads mapping and unmapping
    /// meanwhile, one reading can miss a line, so a few are tried.
    static func of(_ data: Data) -> MemoryOrigin? {
        let address = data.withUnsafeBytes { UInt(bitPattern: $0.baseAddress) }
        for _ in 0..<20 {
            if let origin = find(address) { return origin }
        }
        return nil
    }

    /// The whole list, read to its end: each `read` returns what fits of whole lines, often less than asked,
    /// so a reader that stops at a short read (Foundation's, for a file whose size says 0) sees only the start.
    private static func readMaps() -> String? {
        let descriptor = open("/proc/self/maps", O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += buffer[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func find(_ address: UInt) -> MemoryOrigin? {
        guard let maps = readMaps() else { return nil }
        // "start-end perms offset dev inode [path]"
        for line in maps.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 5 else { continue }
            let range = fields[0].split(separator: "-")
            guard range.count == 2, let start = UInt(range[0], radix: 16), let end = UInt(range[1], radix: 16),
                (start..<end).contains(address)
            else { continue }
            let inode = UInt64(fields[4]) ?? 0
            return inode == 0 ? .anonymous : .file(inode: inode)
        }
        return nil
    }
}

/// The inode of the file at `path`.
func inode(of path: String) throws -> UInt64 {
    var status = stat()
    guard stat(path, &status) == 0 else { throw POSIXError(.ENOENT) }
    return UInt64(status.st_ino)
}

/// An adapter written for the seed's `Data` API only (the three required methods): it keeps the SHA-256 of
/// each upload and where its bytes lived while it had them.
final class ThreeMethodRemote: RemoteStorageAdapter {
    struct Upload: Sendable {
        var sha256: String
        var count: Int
        var origin: MemoryOrigin?
    }

    let uploads = LockedValue<[String: Upload]>([:])

    func uploadFile(data: Data, attachment: AttachmentSync.Attachment) async throws {
        let upload = Upload(
            sha256: FileStreaming.sha256(data), count: data.count, origin: MemoryOrigin.of(data))
        uploads.withLock { $0[attachment.filename] = upload }
    }

    func downloadFile(attachment: AttachmentSync.Attachment) async throws -> Data {
        throw AttachmentError(code: .remoteNotFound, message: "uploads only", attachmentId: attachment.id)
    }

    func deleteFile(attachment: AttachmentSync.Attachment) async throws {}
}

@Suite("Uploads through the Data API map the queue's large files", .cleansUp)
struct MappedUploadTests {
    /// `count` bytes of distinct content.
    static func content(_ count: Int, seed: UInt8 = 7) -> Data {
        Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ Int(seed) &+ $0 >> 9) })
    }

    @Test(
        "the queue hands a three-method adapter a mapping of a large file, not a copy in memory",
        .enabled(if: MemoryOrigin.isObservable))
    func queueUploadIsMapped() async throws {
        let remote = ThreeMethodRemote()
        let harness = try QueueHarness(remote: remote)
        let bytes = Self.content(3 << 20)
        let saved = try await harness.queue.saveFile(data: bytes, mediaType: nil, fileExtension: "bin")
        try await harness.queue.startSync()
        try await harness.waitForState(saved.id, .synced)

        let upload = try #require(remote.uploads.withLock { $0[saved.filename] })
        #expect(upload.count == bytes.count)
        #expect(upload.sha256 == FileStreaming.sha256(bytes))
        let local = try #require(saved.localUri)
        #expect(
            upload.origin == .file(inode: try inode(of: local)),
            "the adapter got the file's own pages, not \(String(describing: upload.origin))")
    }

    @Test(
        "a file the queue does not vouch for, a small file and a file with a second name are read into memory",
        .enabled(if: MemoryOrigin.isObservable))
    func otherFilesAreRead() async throws {
        let folder = try TemporaryDirectory()
        let remote = ThreeMethodRemote()
        let large = URL(fileURLWithPath: folder.path("large.bin"))
        let small = URL(fileURLWithPath: folder.path("small.bin"))
        let largeBytes = Self.content(2 << 20, seed: 1)
        let smallBytes = Self.content(Int(MappedFile.readLimit), seed: 2)
        try largeBytes.write(to: large)
        try smallBytes.write(to: small)
        func upload(_ url: URL, as name: String, vouched: Bool) async throws -> ThreeMethodRemote.Upload {
            let attachment = AttachmentSync.Attachment(id: name, filename: name, state: .queuedUpload)
            try await MappedFile.$immutableFile.withValue(vouched ? url.path : nil) {
                try await remote.uploadFile(fileURL: url, attachment: attachment) { _ in }
            }
            return try #require(remote.uploads.withLock { $0[name] })
        }

        let direct = try await upload(large, as: "direct", vouched: false)
        #expect(direct.origin == .anonymous, "called by other code: the file may change under a mapping")
        let tiny = try await upload(small, as: "tiny", vouched: true)
        #expect(tiny.origin == .anonymous, "at most \(MappedFile.readLimit) bytes: read")
        try FileManager.default.linkItem(at: large, to: URL(fileURLWithPath: folder.path("twin.bin")))
        let linked = try await upload(large, as: "linked", vouched: true)
        #expect(linked.origin == .anonymous, "another name could open the file and cut it")
        try FileManager.default.removeItem(atPath: folder.path("twin.bin"))
        let mapped = try await upload(large, as: "mapped", vouched: true)
        #expect(mapped.origin == .file(inode: try inode(of: large.path)))

        for upload in [direct, linked, mapped] {
            #expect(upload.count == largeBytes.count && upload.sha256 == FileStreaming.sha256(largeBytes))
        }
        #expect(tiny.count == smallBytes.count && tiny.sha256 == FileStreaming.sha256(smallBytes))
    }

    @Test("InMemoryRemoteStorage keeps its own copy of an upload, not the caller's mapping of a local file")
    func inMemoryRemoteCopies() async throws {
        let folder = try TemporaryDirectory()
        let file = URL(fileURLWithPath: folder.path("a.bin"))
        let bytes = Self.content(2 << 20, seed: 3)
        try bytes.write(to: file)
        let remote = InMemoryRemoteStorage()
        let attachment = AttachmentSync.Attachment(id: "a", filename: "a.bin", state: .queuedUpload)
        try await MappedFile.$immutableFile.withValue(file.path) {
            try await remote.uploadFile(fileURL: file, attachment: attachment) { _ in }
        }
        // Someone rewrites the local file in place (the library never does): the remote's copy is unchanged.
        let handle = try FileHandle(forWritingTo: file)
        try handle.write(contentsOf: Data(repeating: 0, count: 4096))
        try handle.close()
        #expect(await remote.file(named: "a.bin") == bytes)
    }
}
