import AttachmentSyncTesting
import Foundation
import GRDB
import TestSupport
import Testing

@testable import AttachmentSync

/// One process of the app transfers at a time (the transfer lease); the others save and delete, and never
/// remove what another process is working on. No file lock is involved: a killed or suspended holder loses
/// the lease when it runs out.
@Suite("Transfer lease", .cleansUp)
struct LeaseTests {
    @Test("while another process syncs, this one saves but neither transfers nor cleans up; after a kill it takes over")
    func anotherProcessSyncs() async throws {
        let worker = try CommandLineTool.locate("attachment-sync-crash-worker")
        let folder = try TemporaryDirectory()
        var environment = ProcessInfo.processInfo.environment
        environment["ATTACHMENT_SYNC_LEASE_MS"] = "500"
        let process = try ChildProcess(worker.url.path, [folder.path, "7", "sync"], environment: environment)
        defer { process.kill() }
        try await withDeadline("the worker starting to sync") {
            for _ in 0..<6_000 {
                let journal = (try? String(contentsOfFile: folder.path("journal"), encoding: .utf8)) ?? ""
                if journal.contains("syncing") { break }
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        // A file named like a generated attachment that no record claims: a clean-up would remove it.
        let stray = folder.path("attachments/00000000-0000-4000-8000-000000000000.jpg")
        try Data("left by a crash, or another process's save".utf8).write(to: URL(fileURLWithPath: stray))

        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: QueueHarness.schema)
        var configuration = AttachmentQueue.Configuration(attachmentsDirectory: folder.path("attachments"))
        configuration.leaseDuration = .milliseconds(500)
        configuration.syncInterval = .zero
        let remote = FileSystemRemoteStorage(directory: folder.path("remote"))
        let queue = AttachmentQueue(db: db, remoteStorage: remote, configuration: configuration)
        // The share extension's case: it starts and saves while the app holds the lease and syncs.
        try await queue.waitForInit()
        let photo = try await queue.saveFile(data: testBytes(700), mediaType: nil, fileExtension: "jpg")
        try await queue.syncNow()
        #expect(FileManager.default.fileExists(atPath: stray), "a queue without the lease removed a file")
        // The app's queue sees the other process's commit (its database checks for them) and uploads it.
        let photoOnRemote = try remote.fileURL(for: photo).path
        try await withDeadline("the syncing process uploading this process's save") {
            for _ in 0..<6_000 where !FileManager.default.fileExists(atPath: photoOnRemote) {
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        #expect(FileManager.default.contents(atPath: photoOnRemote) == testBytes(700))

        process.kill()
        #expect(try await process.wait(seconds: 60) == .signaled(SIGKILL))
        // The holder is gone: this queue takes the lease over at once, runs the check it put off at startup,
        // and transfers.
        #expect(await queue.takeLease())
        let second = try await queue.saveFile(data: testBytes(800), mediaType: nil, fileExtension: "jpg")
        try await queue.syncNow()
        try await queue.waitForStartupCheck()
        #expect(!FileManager.default.fileExists(atPath: stray), "the check put off at startup ran on taking over")
        #expect(try await queue.attachment(id: second.id)?.state == .synced)
        #expect(FileManager.default.contents(atPath: try remote.fileURL(for: second).path) == testBytes(800))
        await queue.close()
        try await db.close()
    }

    @Test("the files of another process's save in progress are left alone until that process is gone")
    func savesInProgressOfOtherProcesses() async throws {
        // A real process stands for the other one: its id is alive (until the test kills it: it must outlive
        // the steps below however slow the machine), then dead.
        let sleeper = try ChildProcess("/bin/sleep", ["3600"])
        defer { sleeper.kill() }
        let device = try QueueHarness()
        try await device.queue.waitForInit()
        await device.queue.close()
        let name = "11111111-2222-4333-8444-555555555555.jpg"
        let staging = FileName.savingName(for: name)
        let claims = ClaimStore(scope: "attachments")
        let other = ClaimStore.Holder(token: "other-process-token", pid: sleeper.pid)
        _ = try await device.db.writeTransaction { tx in
            try claims.claimSaves([name], for: other, now: Int64(Date().timeIntervalSince1970 * 1000), in: tx)
        }
        for file in [name, staging] {
            try Data("a photo being saved".utf8).write(
                to: URL(fileURLWithPath: device.folder.path("attachments/\(file)")))
        }

        let reopened = try QueueHarness(folder: device.folder)
        try await reopened.queue.waitForInit()
        #expect(try reopened.filesOnDisk().sorted() == [staging, name].sorted(), "a live process's save was removed")
        await reopened.queue.close()

        sleeper.kill()
        _ = try await sleeper.wait(seconds: 60)
        let third = try QueueHarness(folder: device.folder)
        try await third.queue.waitForInit()
        #expect(try third.filesOnDisk() == [], "a dead process's save was left behind")
        #expect(try await third.db.readTransaction { tx in try claims.saveClaims(in: tx) } == [])
        await third.queue.close()
    }

    @Test("a save whose claim another process ended (it took this one for gone) fails and leaves nothing")
    func claimTakenAway() async throws {
        let folder = try TemporaryDirectory()
        // Another process's clean-up, just after this save staged its file: it ends every claim (from a
        // connection of its own), so it may remove the files at any moment from now on.
        let cleanUp: @Sendable ([String]) throws -> Void = { _ in
            let connection = try DatabaseQueue(path: folder.path("app.sqlite"))
            try connection.write { db in try db.execute(sql: "DELETE FROM attachment_sync_claims") }
            try connection.close()
        }
        let device = try QueueHarness(folder: folder) { $0.files = FlushHookDisk(onFlush: cleanUp) }
        let error = await #expect(throws: AttachmentError.self) {
            _ = try await device.queue.saveFile(data: testBytes(300), mediaType: nil, fileExtension: "jpg", id: "x")
        }
        #expect(error?.code == .conflict, "\(String(describing: error))")
        #expect(try await device.queue.attachment(id: "x") == nil, "no record without its file")
        #expect(try device.filesOnDisk().isEmpty)
    }
}

/// A file operations layer that runs `onFlush` with the paths of each batch flush, before flushing them.
struct FlushHookDisk: ForwardingDisk {
    let base = SystemFileOperations()
    let onFlush: @Sendable ([String]) throws -> Void

    func synchronizeFiles(atPaths paths: [String]) throws {
        try onFlush(paths)
        try base.synchronizeFiles(atPaths: paths)
    }
}
