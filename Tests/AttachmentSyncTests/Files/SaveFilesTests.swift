import AttachmentSync
import AttachmentSyncTesting
import Foundation
import Testing

@testable import AttachmentSync

/// Local storage that takes content only as data (no plain file URLs), as a transforming adapter does.
struct DataOnlyStorage: ForwardingLocalStorage {
    let base: FileManagerStorageAdapter
}

@Suite("saveFiles: many attachments in one transaction", .cleansUp)
struct SaveFilesTests {
    /// A batch of `count` new attachments: data, copied files and moved files in turn, each with its own
    /// bytes. Returns the batch and, per item, its bytes and the source file (for files).
    private func batch(_ device: QueueHarness, count: Int) throws
        -> (files: [AttachmentQueue.NewFile], bytes: [Data], sources: [URL?])
    {
        var files: [AttachmentQueue.NewFile] = []
        var bytes: [Data] = []
        var sources: [URL?] = []
        for index in 0..<count {
            let data = testBytes(1_000 + index * 37, seed: UInt8(index % 250))
            bytes.append(data)
            switch index % 3 {
            case 0:
                files.append(.init(data: data, mediaType: "image/jpeg", fileExtension: "jpg", metaData: "m\(index)"))
                sources.append(nil)
            default:
                let source = device.folder.url.appendingPathComponent("import-\(index).png")
                try data.write(to: source)
                files.append(.init(fileURL: source, mediaType: "image/png", moveFile: index % 3 == 2))
                sources.append(source)
            }
        }
        return (files, bytes, sources)
    }

    @Test("every item is saved with its bytes, size and hash, the hook sees them all at once, and all upload")
    func savesAndUploadsABatch() async throws {
        let device = try QueueHarness()
        let (files, bytes, sources) = try batch(device, count: 30)
        let seen = LockedValue<[String]>([])
        let saved = try await device.queue.saveFiles(files) { tx, attachments in
            seen.withLock { $0 = attachments.map(\.id) }
            for attachment in attachments {
                try tx.execute(
                    sql: "INSERT INTO checklists (id, photo_id) VALUES (?, ?)",
                    arguments: ["c-" + attachment.id, attachment.id])
            }
        }
        #expect(saved.count == 30)
        #expect(seen.withLock { $0 } == saved.map(\.id))
        #expect(Set(saved.map(\.id)).count == 30)
        for (index, attachment) in saved.enumerated() {
            #expect(attachment.state == .queuedUpload)
            #expect(attachment.size == Int64(bytes[index].count))
            #expect(device.bytesOnDisk(attachment.filename) == bytes[index], "item \(index)")
            #expect(attachment.filename.hasSuffix(index % 3 == 0 ? ".jpg" : ".png"))
            if let source = sources[index] {
                let moved = index % 3 == 2
                #expect(FileManager.default.fileExists(atPath: source.path) == !moved, "item \(index)")
            }
        }
        #expect(try device.filesOnDisk() == Set(saved.map(\.filename)), "no staging file is left")
        let rows = try await device.db.get(sql: "SELECT count(*) AS n FROM checklists") { try $0.getInt(name: "n") }
        #expect(rows == 30)
        // The records come out in the batch's order (oldest first), and all reach the remote intact.
        let records = try await device.queue.allAttachments()
        #expect(records.map(\.id) == saved.map(\.id))
        try await device.queue.syncNow()
        let remote = try device.memoryRemote
        for (index, attachment) in saved.enumerated() {
            #expect(try await device.state(of: attachment.id) == .synced)
            #expect(await remote.file(named: attachment.filename) == bytes[index])
        }
    }

    @Test("a taken id, a repeated id, a missing file or a bad name fails the whole batch: nothing is left")
    func allOrNothing() async throws {
        let device = try QueueHarness()
        let existing = try await device.queue.saveFile(data: testBytes(5), mediaType: nil, fileExtension: "jpg")
        let before = try device.filesOnDisk()
        let missing = device.folder.url.appendingPathComponent("not-there.png")
        let cases: [(name: String, extra: AttachmentQueue.NewFile, code: AttachmentError.Code, names: String)] = [
            (
                "taken id", .init(data: testBytes(9), mediaType: nil, fileExtension: "jpg", id: existing.id),
                .alreadyExists, existing.id
            ),
            (
                "repeated id", .init(data: testBytes(9), mediaType: nil, fileExtension: "jpg", id: "twice"),
                .alreadyExists, "twice"
            ),
            ("missing file", .init(fileURL: missing, mediaType: nil), .localFileNotFound, missing.path),
            (
                "bad name", .init(data: testBytes(9), mediaType: nil, fileExtension: "jpg", id: "../escape"),
                .invalidName, "escape"
            ),
        ]
        for item in cases {
            var (files, _, sources) = try batch(device, count: 6)
            files.insert(.init(data: testBytes(3), mediaType: nil, fileExtension: "jpg", id: "twice"), at: 2)
            files.insert(item.extra, at: 4)
            let error = await #expect(throws: AttachmentError.self, "\(item.name)") {
                try await device.queue.saveFiles(files)
            }
            #expect(error?.code == item.code, "\(item.name): \(String(describing: error))")
            #expect(
                error.map { String(describing: $0).contains(item.names) } == true,
                "\(item.name): \(String(describing: error))")
            #expect(try device.filesOnDisk() == before, "\(item.name)")
            #expect(try await device.queue.allAttachments().map(\.id) == [existing.id], "\(item.name)")
            for source in sources.compactMap({ $0 }) {
                #expect(FileManager.default.fileExists(atPath: source.path), "\(item.name): sources untouched")
            }
        }
    }

    @Test("a hook that throws, or a failed flush, leaves no record and no file, and every source in place")
    func failuresLeaveNothing() async throws {
        let device = try QueueHarness()
        let (files, bytes, sources) = try batch(device, count: 9)
        await #expect(throws: InjectedFailure.self) {
            try await device.queue.saveFiles(files) { _, _ in throw InjectedFailure("the app's rows failed") }
        }
        #expect(try device.filesOnDisk().isEmpty)
        #expect(try await device.queue.allAttachments().isEmpty)
        for (index, source) in sources.enumerated() {
            guard let source else { continue }
            #expect(FileManager.default.contents(atPath: source.path) == bytes[index])
        }

        let disk = FlushFailingDisk()
        let failing = try QueueHarness(localStorage: FileManagerStorageAdapter(files: disk)) { $0.files = disk }
        let (more, moreBytes, moreSources) = try batch(failing, count: 9)
        let error = await #expect(throws: AttachmentError.self) { try await failing.queue.saveFiles(more) }
        #expect(error?.message.contains("fsync failed") == true)
        #expect(try failing.filesOnDisk().isEmpty)
        #expect(try await failing.queue.allAttachments().isEmpty)
        for (index, source) in moreSources.enumerated() {
            guard let source else { continue }
            #expect(FileManager.default.contents(atPath: source.path) == moreBytes[index])
        }
    }

    @Test("an empty batch saves nothing and does not call the hook")
    func emptyBatch() async throws {
        let device = try QueueHarness()
        let called = LockedValue(false)
        let saved = try await device.queue.saveFiles([]) { _, _ in called.withLock { $0 = true } }
        #expect(saved.isEmpty)
        #expect(!called.withLock { $0 })
    }

    @Test("a local adapter that transforms what it stores gets every item as data")
    func customLocalAdapter() async throws {
        let device = try QueueHarness(localStorage: DataOnlyStorage(base: FileManagerStorageAdapter()))
        let (files, bytes, _) = try batch(device, count: 6)
        let saved = try await device.queue.saveFiles(files)
        for (index, attachment) in saved.enumerated() {
            #expect(device.bytesOnDisk(attachment.filename) == bytes[index])
        }
        try await device.queue.syncNow()
        for attachment in saved { #expect(try await device.state(of: attachment.id) == .synced) }
    }

    @Test("flushing several files at once flushes each, and a missing one is an error naming it")
    func synchronizeFiles() throws {
        let folder = try TemporaryDirectory()
        let paths = (0..<5).map { folder.path("f\($0)") }
        for path in paths { try Data("x".utf8).write(to: URL(fileURLWithPath: path)) }
        let files = SystemFileOperations()
        try files.synchronizeFiles(atPaths: paths)
        try files.synchronizeFiles(atPaths: [paths[0]])
        let missing = folder.path("gone")
        let error = #expect(throws: AttachmentError.self) { try files.synchronizeFiles(atPaths: [missing, paths[0]]) }
        #expect(error?.path == missing)
    }
}
