import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// The real file system, with a log of the files opened for reading and of every flush.
final class LoggingDisk: ForwardingDisk, Sendable {
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

    func openForReading(atPath path: String) throws -> FileHandle {
        note("read \(path)")
        return try base.openForReading(atPath: path)
    }
    func openForWriting(atPath path: String, at offset: Int64?) throws -> any FileWriter {
        Writer(try base.openForWriting(atPath: path, at: offset), path: path, disk: self)
    }
    func synchronizeFile(atPath path: String) throws {
        note("flush \(path)")
        try base.synchronizeFile(atPath: path)
    }
    func synchronizeFiles(atPaths paths: [String]) throws {
        for path in paths { note("flush \(path)") }
        try base.synchronizeFiles(atPaths: paths)
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
        let events = device.queue.events
        try await device.queue.startSync()
        _ = try await withDeadline("the download") {
            await events.first { if case .downloaded = $0 { true } else { false } }
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
        await base.setFile(right, named: "p1.bin")
        // The adapter writes half of the file and claims the digest of the whole.
        let device = try QueueHarness(
            remote: TruncatingRemote(base: base, reportsSize: false, claimsWritten: right),
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

@Suite("Finished downloads commit in groups", .cleansUp)
struct DownloadGroupCommitTests {
    @Test("downloads finishing while a group commits form the next: one flush for their files, all committed")
    func downloadsCommitInGroups() async throws {
        let disk = GatedDisk(holding: .firstFlushOfFiles)
        let device = try QueueHarness(localStorage: FileManagerStorageAdapter(files: disk)) { $0.files = disk }
        try await device.queue.waitForInit()
        let ids = (0..<5).map { "p\($0)" }
        for id in ids {
            _ = try await device.db.execute(
                sql: "INSERT INTO attachments (id, filename, state, timestamp, has_synced) VALUES (?, ?, ?, 1, 0)",
                parameters: [id, "\(id).bin", AttachmentState.queuedDownload.rawValue])
        }
        let worker = await device.queue.makeTransferWorker()
        let store = worker.store
        func entry(_ index: Int) async throws -> DownloadCommitter.Entry {
            let id = ids[index]
            let record = try #require(try await device.db.readTransaction { try store.record(id: id, in: $0) })
            let staging = (device.attachmentsPath as NSString).appendingPathComponent(".staging-\(id)")
            try testBytes(1000 + index, seed: UInt8(index)).write(to: URL(fileURLWithPath: staging))
            return DownloadCommitter.Entry(
                record: record, size: Int64(1000 + index),
                sha256: FileStreaming.sha256(testBytes(1000 + index, seed: UInt8(index))), stagingPath: staging,
                finalPath: (device.attachmentsPath as NSString).appendingPathComponent("\(id).bin"),
                localName: "\(id).bin", needsFlush: true)
        }
        let entries = try await (0..<5).asyncMap { try await entry($0) }
        // p3's record is archived before its bytes are committed: its file must not stay.
        _ = try await device.db.execute(
            sql: "UPDATE attachments SET state = ? WHERE id = 'p3'", parameters: [AttachmentState.archived.rawValue])

        let committer = worker.committer
        let first = Task { try await committer.commit(entries[0], with: worker) }
        _ = try await withDeadline("the first group to reach its flush") {
            await disk.reached.stream.first { _ in true }
        }
        let rest = (1..<5).map { index in Task { try await committer.commit(entries[index], with: worker) } }
        try await waitFor("the others to wait for the next group") {
            while committer.waiting < 4 { await Task.yield() }
        }
        disk.gate.signal()
        var outcomes = [try await first.value]
        for task in rest { outcomes.append(try await task.value) }

        #expect(disk.groups.withLock { $0 } == [1, 4], "one flush for the first download, one for the other four")
        for (index, outcome) in outcomes.enumerated() {
            let id = ids[index]
            if id == "p3" {
                #expect("\(outcome)" == "\(AttachmentQueue.TransferOutcome.superseded)")
                #expect(device.bytesOnDisk("p3.bin") == nil)
            } else {
                #expect("\(outcome)" == "\(AttachmentQueue.TransferOutcome.completed(bytes: Int64(1000 + index)))")
                #expect(device.bytesOnDisk("\(id).bin") == testBytes(1000 + index, seed: UInt8(index)))
                let record = try #require(try await device.queue.attachment(id: id))
                #expect(record.state == .synced)
                #expect(record.contentHash == FileStreaming.sha256(testBytes(1000 + index, seed: UInt8(index))))
            }
        }
        #expect(try device.filesOnDisk() == ["p0.bin", "p1.bin", "p2.bin", "p4.bin"])
    }
}

extension Sequence {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var results: [T] = []
        for element in self { results.append(try await transform(element)) }
        return results
    }
}

@Suite("Finished uploads commit in groups", .cleansUp)
struct UploadGroupCommitTests {
    @Test("uploads finishing while a group commits share the next transaction; one that cannot commit fails alone")
    func uploadsCommitInGroups() async throws {
        let device = try QueueHarness()
        try await device.queue.waitForInit()
        let ids = (0..<5).map { "u\($0)" }
        for id in ids {
            _ = try await device.db.execute(
                sql: "INSERT INTO attachments (id, filename, state, timestamp, has_synced) VALUES (?, ?, ?, 1, 0)",
                parameters: [id, "\(id).bin", AttachmentState.queuedUpload.rawValue])
        }
        // u3 was archived meanwhile (superseded); u2's record refuses every change (a constraint, say).
        _ = try await device.db.execute(
            sql: "UPDATE attachments SET state = ? WHERE id = 'u3'", parameters: [AttachmentState.archived.rawValue])
        _ = try await device.db.execute(
            sql: """
                CREATE TRIGGER refuse_u2 BEFORE UPDATE ON attachments WHEN OLD.id = 'u2'
                BEGIN SELECT RAISE(ABORT, 'injected: u2 cannot change'); END
                """)
        let committer = await device.queue.makeTransferWorker().uploadCommitter
        func entry(_ index: Int) -> UploadCommitter.Entry {
            UploadCommitter.Entry(id: ids[index], size: Int64(100 + index))
        }

        // The database's writer is held, so the first upload's transaction waits and the others gather.
        // It writes a record with the queue's next timestamp: the uploads it held up commit after it, so
        // their records must carry later times.
        let held = DispatchSemaphore(value: 0)
        let heldAt = await device.queue.timestamps.next()
        let holding = Task {
            try await device.db.writeTransaction { tx in
                _ = try tx.execute(
                    sql: """
                        INSERT INTO attachments (id, filename, state, timestamp, has_synced)
                        VALUES ('w', 'w.bin', ?, ?, 0)
                        """,
                    arguments: [AttachmentState.archived.rawValue, heldAt])
                _ = held.wait(timeout: .now() + 30)
            }
        }
        let first = Task { try await committer.commit(entry(0)) }
        try await waitFor("the first upload's transaction to start") {
            while committer.committing != 1 { await Task.yield() }
        }
        let rest = (1..<5).map { index in Task { try await committer.commit(entry(index)) } }
        try await waitFor("the others to wait for the next group") {
            while committer.waiting < 4 { await Task.yield() }
        }
        held.signal()
        try await holding.value

        #expect(try await first.value)
        var outcomes: [Result<Bool, any Error>] = []
        for task in rest { outcomes.append(await task.result) }
        #expect(try outcomes[0].get() && !(try outcomes[2].get()) && (try outcomes[3].get()))
        #expect(throws: (any Error).self) { try outcomes[1].get() }
        // One transaction for u0, one for the other four (refused for u2), then one each.
        #expect(committer.transactions == [1, 4, 1, 1, 1, 1])
        for (index, id) in ids.enumerated() {
            let record = try #require(try await device.queue.attachment(id: id))
            switch id {
            case "u2": #expect(record.state == .queuedUpload)
            case "u3": #expect(record.state == .archived)
            default:
                #expect(record.state == .synced && record.hasSynced && record.size == Int64(100 + index))
                #expect(record.timestamp > heldAt, "\(id) synced at \(record.timestamp), before a write it followed")
            }
        }
    }
}
