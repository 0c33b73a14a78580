import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// A file operations layer whose flushes fail, as on a disk that reports an I/O error.
struct FlushFailingDisk: ForwardingDisk {
    let base = SystemFileOperations()

    static var failure: AttachmentError {
        AttachmentError(code: .fileSystem, message: "fsync failed (injected)", underlying: POSIXError(.EIO))
    }

    final class Writer: FileWriter {
        let base: any FileWriter
        init(_ base: any FileWriter) { self.base = base }
        func write(_ data: Data) throws { try base.write(data) }
        func synchronize() throws { throw FlushFailingDisk.failure }
        func close() { base.close() }
    }

    func openForWriting(atPath path: String, at offset: Int64?) throws -> any FileWriter {
        Writer(try base.openForWriting(atPath: path, at: offset))
    }
    func synchronizeFile(atPath path: String) throws { throw Self.failure }
    func synchronizeDirectory(atPath path: String) throws { throw Self.failure }
}

@Suite("saveFile keeps what it is handed", .cleansUp)
struct SaveFileSafetyTests {
    @Test("moveFile with a hook that throws: the file stays where it was, and nothing is left")
    func hookFailureKeepsTheSource() async throws {
        let device = try QueueHarness()
        let source = device.folder.url.appendingPathComponent("clip.mov")
        try testBytes(200_000).write(to: source)
        await #expect(throws: InjectedFailure.self) {
            try await device.queue.saveFile(fileURL: source, mediaType: nil, moveFile: true) { _, _ in
                throw InjectedFailure("the app's row could not be written")
            }
        }
        #expect(FileManager.default.contents(atPath: source.path) == testBytes(200_000))
        #expect(try device.filesOnDisk().isEmpty)
        #expect(try await device.queue.allAttachments().isEmpty)
    }

    @Test("a save cancelled while its commit fails leaves no file behind, even with an id of the app's own")
    func cancelledFailedCommitLeavesNothing() async throws {
        let folder = try TemporaryDirectory()
        let device = try QueueHarness(folder: folder)
        let saving = LockedValue<Task<AttachmentSync.Attachment, any Error>?>(nil)
        let (go, letGo) = AsyncStream.makeStream(of: Void.self)
        let save = Task {
            for await _ in go { break }
            // The app's task is cancelled while the transaction runs (a view went away), and the commit fails.
            return try await device.queue.saveFile(
                data: testBytes(64), mediaType: nil, fileExtension: "jpg", id: "note-1"
            ) {
                _, _ in
                saving.withLock { $0?.cancel() }
                throw InjectedFailure("the app's row could not be written")
            }
        }
        saving.withLock { $0 = save }
        letGo.yield()
        await #expect(throws: InjectedFailure.self) { try await save.value }
        #expect(try await device.queue.allAttachments().isEmpty)
        #expect(try device.filesOnDisk().isEmpty, "the save's file, with no record, is removed at once")
        await device.close()

        // And a later start finds nothing to keep: no file without a record stays in the folder.
        let reopened = try QueueHarness(folder: folder)
        _ = try await reopened.queue.allAttachments()
        #expect(try reopened.filesOnDisk().isEmpty)
    }

    @Test("while a save's files are flushed, the queue answers other calls (the flush does not hold the actor)")
    func flushDoesNotHoldTheQueue() async throws {
        let disk = GatedDisk(holding: .firstFlushOfFiles)
        let device = try QueueHarness(localStorage: FileManagerStorageAdapter(files: disk)) { $0.files = disk }
        try await device.queue.waitForInit()
        let save = Task { try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg") }
        for await _ in disk.reached.stream { break }
        // The save now waits in its flush; the queue's other callers are not held up by it.
        try await waitFor("a read of the queue while a save's files are flushed", seconds: 10) {
            _ = try? await device.queue.allAttachments()
        }
        disk.gate.signal()
        let saved = try await save.value
        #expect(device.bytesOnDisk(saved.filename) == testBytes(10))
        #expect(try await device.queue.allAttachments().map(\.id) == [saved.id])
    }

    @Test("a folder, a FIFO or a dangling link is refused with a typed error naming it; nothing is written")
    func nonRegularFilesAreRefused() async throws {
        let device = try QueueHarness()
        let folder = device.folder.url.appendingPathComponent("a-folder")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let fifo = device.folder.url.appendingPathComponent("a-fifo")
        #expect(mkfifo(fifo.path, 0o644) == 0)
        let dangling = device.folder.url.appendingPathComponent("dangling")
        try FileManager.default.createSymbolicLink(atPath: dangling.path, withDestinationPath: "/nonexistent/file")
        for (url, code) in [
            (folder, AttachmentError.Code.unsupported), (fifo, .unsupported), (dangling, .localFileNotFound),
        ] {
            let error = await #expect(throws: AttachmentError.self) {
                try await device.queue.saveFile(fileURL: url, mediaType: nil, moveFile: true)
            }
            #expect(error?.code == code, "\(url.lastPathComponent)")
            #expect(error?.path == url.path)
        }
        #expect(try device.filesOnDisk().isEmpty)
        #expect(FileManager.default.fileExists(atPath: fifo.path))
    }

    @Test("moving a file out of the attachments folder itself is refused: it may be another attachment's")
    func movingFromInsideIsRefused() async throws {
        let device = try QueueHarness()
        let photo = try await device.queue.saveFile(data: testBytes(100), mediaType: nil, fileExtension: "jpg")
        let error = await #expect(throws: AttachmentError.self) {
            try await device.queue.saveFile(
                fileURL: URL(fileURLWithPath: try #require(photo.localUri)), mediaType: nil, moveFile: true)
        }
        #expect(error?.code == .invalidState)
        #expect(device.bytesOnDisk(photo.filename) == testBytes(100))
        // A copy is fine.
        let copy = try await device.queue.saveFile(
            fileURL: URL(fileURLWithPath: try #require(photo.localUri)), mediaType: nil, moveFile: false)
        #expect(device.bytesOnDisk(copy.filename) == testBytes(100))
        #expect(device.bytesOnDisk(photo.filename) == testBytes(100))
    }

    @Test("a failed flush is an error: the save throws and leaves no record and no file")
    func failedFlushIsAnError() async throws {
        let disk = FlushFailingDisk()
        let device = try QueueHarness(localStorage: FileManagerStorageAdapter(files: disk)) { $0.files = disk }
        let source = device.folder.url.appendingPathComponent("clip.mov")
        try testBytes(1000).write(to: source)
        let error = await #expect(throws: AttachmentError.self) {
            try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        }
        #expect(error?.message.contains("fsync failed") == true)
        await #expect(throws: AttachmentError.self) {
            try await device.queue.saveFile(fileURL: source, mediaType: nil, moveFile: true)
        }
        #expect(try device.filesOnDisk().isEmpty)
        #expect(try await device.queue.allAttachments().isEmpty)
        #expect(FileManager.default.contents(atPath: source.path) == testBytes(1000))
    }

    @Test("the file reaches the disk, its name is flushed with its folder, then the record commits")
    func flushOrder() async throws {
        try await CrashHarness().use { device in
            let source = try device.userFile("clip.mov", testBytes(5000))
            _ = try await device.queue.saveFile(fileURL: source, mediaType: nil, id: "clip", moveFile: true)
            let operations = device.crash.operations
            let final = (device.attachments as NSString).appendingPathComponent("clip.mov")
            let placed = try #require(operations.firstIndex { $0.hasPrefix("link ") && $0.hasSuffix(final) })
            let fileFlushed = try #require(operations.firstIndex { $0.hasPrefix("flush ") })
            let folderFlushed = try #require(
                operations.indices.first { $0 > placed && operations[$0] == "flush-folder \(device.attachments)" })
            let commit = try #require(operations.indices.first { $0 > folderFlushed && operations[$0] == "commit" })
            let removed = try #require(operations.firstIndex { $0 == "remove \(source.path)" })
            #expect(fileFlushed < placed, "the bytes are on disk before the name points at them")
            #expect(commit < removed, "the original goes only after the commit")
            #expect(FileManager.default.contents(atPath: final) == testBytes(5000))
        }
    }
}
