import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

@Suite("Startup's check of files in the background", .cleansUp)
struct BackgroundStartupCheckTests {
    /// A folder whose earlier run left a synced attachment with its file, a synced one whose file is gone
    /// (unless not `withMissingFile`), a temporary file and a generated-looking file no record claims.
    func preparedFolder(withMissingFile: Bool = true) async throws -> TemporaryDirectory {
        let folder = try TemporaryDirectory()
        let first = try QueueHarness(folder: folder)
        try await first.queue.waitForInit()
        for id in withMissingFile ? ["s1", "s2"] : ["s1"] {
            try await first.db.execute(
                sql: "INSERT INTO attachments (id, filename, state, timestamp, has_synced, local_uri, size) "
                    + "VALUES (?, ?, ?, 1, 1, ?, 4)",
                parameters: [id, "\(id).jpg", AttachmentState.synced.rawValue, "\(id).jpg"])
        }
        let attachments = folder.url.appendingPathComponent("attachments")
        try Data("s1!!".utf8).write(to: attachments.appendingPathComponent("s1.jpg"))
        for name in [".attachment-sync-tmp-old", UUID().uuidString.lowercased() + ".jpg"] {
            try Data("x".utf8).write(to: attachments.appendingPathComponent(name))
        }
        await first.close()
        return folder
    }

    /// A device over `folder` whose startup check (`check`) holds at its listing of the attachments folder.
    func heldDevice(
        _ folder: TemporaryDirectory, remote: InMemoryRemoteStorage? = nil, check: StartupFileCheck = .inBackground
    ) throws -> (QueueHarness, GatedDisk) {
        let disk = GatedDisk(holding: .firstListing(of: folder.path("attachments")))
        let device = try QueueHarness(
            folder: folder, remote: remote, localStorage: FileManagerStorageAdapter(files: disk)
        ) {
            $0.files = disk
            $0.startupFileCheck = check
        }
        return (device, disk)
    }

    /// Returns once the check has read the records and waits to list the folder.
    func checkReachesListing(_ disk: GatedDisk) async throws {
        _ = try await withDeadline("the background check to list the folder") {
            await disk.reached.stream.first { _ in true }
        }
    }

    @Test("a save in progress while the check lists the folder keeps its file; the check still does its work")
    func saveDuringTheCheckIsKept() async throws {
        // No record to fix: the check's write would wait for the save's transaction, held open below.
        let folder = try await preparedFolder(withMissingFile: false)
        let (device, disk) = try heldDevice(folder)
        try await device.queue.waitForInit()
        try await checkReachesListing(disk)

        // A save whose file is in place (its staging twin beside it) and whose commit waits in its hook: no
        // record refers to the file yet when the check goes on.
        let hookGate = DispatchSemaphore(value: 0)
        let inHook = AsyncStream.makeStream(of: Void.self)
        let content = testBytes(300, seed: 7)
        let save = Task {
            try await device.queue.saveFile(data: content, mediaType: nil, fileExtension: "jpg") { _, _ in
                inHook.continuation.yield()
                if hookGate.wait(timeout: .now() + 20) == .timedOut { throw HarnessError("the hook gate never opened") }
            }
        }
        _ = try await withDeadline("the save to reach its hook") { await inHook.stream.first { _ in true } }
        disk.gate.signal()
        try await device.queue.waitForStartupCheck()
        hookGate.signal()
        let saved = try await save.value

        #expect(device.bytesOnDisk("\(saved.id).jpg") == content, "the save's file survived the check")
        #expect(try await device.state(of: saved.id) == .queuedUpload)
        #expect(try device.filesOnDisk() == ["s1.jpg", "\(saved.id).jpg"], "the leftovers were removed")
    }

    @Test("the staging name a committed save left goes, even while that attachment uploads")
    func committedSavesStagingNameGoes() async throws {
        let folder = try TemporaryDirectory()
        let remote = InMemoryRemoteStorage()
        let first = try QueueHarness(folder: folder, remote: remote)
        let saved = try await first.queue.saveFile(data: testBytes(50), mediaType: nil, fileExtension: "jpg")
        await first.close()
        // The process stopped after the commit, before the staging name was removed.
        let attachments = folder.path("attachments")
        let name = "\(saved.id).jpg"
        let staging = ".attachment-sync-save-\(name)"
        try FileManager.default.linkItem(
            atPath: (attachments as NSString).appendingPathComponent(name),
            toPath: (attachments as NSString).appendingPathComponent(staging))

        let (device, disk) = try heldDevice(folder, remote: remote)
        await remote.hold()
        try await device.queue.startSync()
        // The upload is in flight (its id touched) before the check lists the folder.
        await remote.waitForInFlight(count: 1)
        try await checkReachesListing(disk)
        disk.gate.signal()
        try await device.queue.waitForStartupCheck()
        #expect(!(try device.filesOnDisk().contains(staging)), "the committed save's staging name is gone")
        #expect(device.bytesOnDisk(name) == testBytes(50))
        await remote.release()
        try await device.waitForState(saved.id, .synced)
        #expect(await remote.file(named: name) == testBytes(50))
    }

    @Test("close() during the check stops it; the next startup checks again")
    func closeStopsTheCheck() async throws {
        let folder = try await preparedFolder()
        let (device, disk) = try heldDevice(folder)
        try await device.queue.waitForInit()
        try await checkReachesListing(disk)
        let closing = Task { await device.close() }
        disk.gate.signal()
        await closing.value

        let again = try QueueHarness(folder: folder) { $0.startupFileCheck = .inBackground }
        try await again.queue.waitForStartupCheck()
        #expect(try await again.state(of: "s2") == .queuedDownload)
        #expect(try again.filesOnDisk() == ["s1.jpg"])
    }

    @Test("automatic: a table above the threshold is checked in the background, with the same outcome")
    func automaticThreshold() async throws {
        let folder = try await preparedFolder()
        let (device, disk) = try heldDevice(folder, check: .automatic(backgroundAbove: 1))
        // Two records, above 1: the queue is ready while the listing is still held.
        try await device.queue.waitForInit()
        try await checkReachesListing(disk)
        #expect(try await device.state(of: "s2") == .synced, "not checked yet")
        disk.gate.signal()
        try await device.queue.waitForStartupCheck()
        #expect(try await device.state(of: "s2") == .queuedDownload)
        #expect(try device.filesOnDisk() == ["s1.jpg"])
    }
}
