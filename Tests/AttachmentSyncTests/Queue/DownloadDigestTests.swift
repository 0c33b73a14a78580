import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// The real file system, with a log of the files opened for reading and of every flush.
final class LoggingDisk: FileOperations, Sendable {
    let base = SystemFileOperations()
    let log = LockedValue<[String]>([])

    final class Writer: FileWriter {
        let base: any FileWriter
        let path: String
        let disk: LoggingDisk
        init(_ base: any FileWriter, path: String, disk: LoggingDisk) {
            self.base = base
            self.path = path
            self.disk = disk
        }
        func write(_ data: Data) throws { try base.write(data) }
        func synchronize() throws {
            disk.note("flush \(path)")
            try base.synchronize()
        }
        func close() { base.close() }
    }

    func note(_ entry: String) { log.withLock { $0.append(entry) } }
    func entries(under folder: String) -> [String] {
        log.withLock { $0 }.filter { $0.contains(folder + "/") }
    }

    func info(atPath path: String) -> FileInfo? { base.info(atPath: path) }
    func infoFollowingLinks(atPath path: String) -> FileInfo? { base.infoFollowingLinks(atPath: path) }
    func contentsOfDirectory(atPath path: String) throws -> [String] { try base.contentsOfDirectory(atPath: path) }
    func openForReading(atPath path: String) throws -> FileHandle {
        note("read \(path)")
        return try base.openForReading(atPath: path)
    }
    func openForWriting(atPath path: String, at offset: Int64?) throws -> any FileWriter {
        Writer(try base.openForWriting(atPath: path, at: offset), path: path, disk: self)
    }
    func rename(_ source: String, to target: String) throws { try base.rename(source, to: target) }
    func link(_ source: String, to target: String) throws { try base.link(source, to: target) }
    func removeFile(atPath path: String) throws { try base.removeFile(atPath: path) }
    func removeTree(atPath path: String) throws { try base.removeTree(atPath: path) }
    func makeDirectory(atPath path: String) throws { try base.makeDirectory(atPath: path) }
    func synchronizeFile(atPath path: String) throws {
        note("flush \(path)")
        try base.synchronizeFile(atPath: path)
    }
    func synchronizeDirectory(atPath path: String) throws { try base.synchronizeDirectory(atPath: path) }
    func synchronizeFiles(atPaths paths: [String]) throws {
        for path in paths { note("flush \(path)") }
        try base.synchronizeFiles(atPaths: paths)
    }
}

/// A remote that writes the bytes it is given but reports the digest of other bytes: an adapter with a bug.
struct MisreportingRemote: RemoteStorageAdapter {
    let base: InMemoryRemoteStorage
    /// What the adapter claims it wrote.
    let claimed: Data

    func uploadFile(data: Data, attachment: AttachmentSync.Attachment) async throws {
        try await base.uploadFile(data: data, attachment: attachment)
    }
    func downloadFile(attachment: AttachmentSync.Attachment) async throws -> Data {
        try await base.downloadFile(attachment: attachment)
    }
    func deleteFile(attachment: AttachmentSync.Attachment) async throws {
        try await base.deleteFile(attachment: attachment)
    }
    func downloadFile(
        attachment: AttachmentSync.Attachment, into destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws -> RemoteObjectInfo {
        try await base.downloadFile(attachment: attachment).write(to: destination)
        return RemoteObjectInfo(writtenSize: Int64(claimed.count), writtenSHA256: FileStreaming.sha256(claimed))
    }
}

@Suite("A download is hashed once and flushed once", .cleansUp)
struct DownloadDigestTests {
    @Test("a download the adapter hashed on the way is flushed once before it is placed and never read back")
    func hashedOnTheWay() async throws {
        let folder = try TemporaryDirectory()
        let remoteFolder = folder.path("remote")
        let content = testBytes(300_000, seed: 4)
        let remote = FileSystemRemoteStorage(directory: remoteFolder)
        try await remote.uploadFile(
            data: content,
            attachment: Attachment(
                id: "p1", filename: "p1.bin", state: .queuedUpload, contentHash: FileStreaming.sha256(content)))
        let disk = LoggingDisk()
        let device = try QueueHarness(
            folder: folder, remote: remote, localStorage: FileManagerStorageAdapter(files: disk),
            customWatch: fixedWatch([try WatchedAttachmentItem(id: "p1", fileExtension: "bin")])
        ) { $0.files = disk }
        try await device.queue.startSync()
        try await waitFor("the download") {
            while (try? await device.state(of: "p1")) != .synced { try? await Task.sleep(for: .milliseconds(2)) }
        }
        #expect(device.bytesOnDisk("p1.bin") == content)
        let record = try #require(try await device.queue.attachment(id: "p1"))
        #expect(record.contentHash == FileStreaming.sha256(content))
        let entries = disk.entries(under: device.attachmentsPath)
        #expect(!entries.contains { $0.hasPrefix("read ") }, "\(entries)")
        #expect(entries.filter { $0.hasPrefix("flush ") }.count == 1, "\(entries)")
    }

    @Test("a written digest for a size other than the file's is not trusted: the file is hashed and refused")
    func misreportedDigestIsNotTrusted() async throws {
        let right = testBytes(10_000, seed: 1)
        let base = InMemoryRemoteStorage()
        // The object was damaged at rest: half of it is gone, and the adapter claims the whole.
        await base.setFile(right.prefix(5_000), named: "p1.bin")
        let device = try QueueHarness(
            remote: MisreportingRemote(base: base, claimed: right),
            customWatch: fixedWatch([
                try WatchedAttachmentItem(id: "p1", fileExtension: "bin", contentHash: FileStreaming.sha256(right))
            ]))
        try await device.queue.startSync()
        try await waitFor("the first download") { await base.waitForCalls(.download, count: 1) }
        try await device.queue.syncNow()
        #expect(try await device.state(of: "p1") == .queuedDownload, "never synced with the wrong bytes")
        #expect(try device.filesOnDisk().isEmpty)
    }
}
