import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// Local storage whose `makeDir` fails a given number of times (a volume not mounted yet, say).
final class FlakyFolderStorage: ForwardingLocalStorage {
    let base = FileManagerStorageAdapter()
    let failuresLeft: LockedValue<Int>

    init(failures: Int) { failuresLeft = LockedValue(failures) }

    func makeDir(path: String) async throws {
        let fail = failuresLeft.withLock { left in
            defer { left = max(0, left - 1) }
            return left > 0
        }
        if fail { throw AttachmentError(code: .fileSystem, message: "volume not ready (injected)", path: path) }
        try await base.makeDir(path: path)
    }
    func plainFileURL(filePath: String) -> URL? { base.plainFileURL(filePath: filePath) }
}

/// Local storage that transforms what it stores (so the queue hands it data), whose `saveFile` waits at a
/// gate the test opens: a save caught in the middle.
final class GatedStorage: ForwardingLocalStorage {
    let base = FileManagerStorageAdapter()
    let arrived = AsyncStream.makeStream(of: Void.self)
    let gate = AsyncStream.makeStream(of: Void.self)

    func saveFile(filePath: String, data: Data) async throws -> Int64 {
        arrived.continuation.yield()
        var iterator = gate.stream.makeAsyncIterator()
        _ = await iterator.next()
        return try await base.saveFile(filePath: filePath, data: data)
    }
}

/// Local storage that stops right after moving a file to `name` (once) and waits at a gate the test opens: a
/// transfer caught between its file and its commit, where the test can interrupt it.
final class PauseAfterMoveStorage: ForwardingLocalStorage {
    let base = FileManagerStorageAdapter()
    let target: LockedValue<String?>
    let arrived = AsyncStream.makeStream(of: Void.self)
    let gate = AsyncStream.makeStream(of: Void.self)

    init(pausingAfterMovingTo name: String) { target = LockedValue(name) }

    func moveFile(sourcePath: String, targetPath: String) async throws {
        try await base.moveFile(sourcePath: sourcePath, targetPath: targetPath)
        let hit = target.withLock { name -> Bool in
            guard let wanted = name, (targetPath as NSString).lastPathComponent == wanted else { return false }
            name = nil
            return true
        }
        guard hit else { return }
        arrived.continuation.yield()
        var iterator = gate.stream.makeAsyncIterator()
        _ = await iterator.next()
    }
    func plainFileURL(filePath: String) -> URL? { base.plainFileURL(filePath: filePath) }
}

@Suite("Lifecycle and single-flight edges", .cleansUp)
struct LifecycleTests {
    @Test("a caller joining a download whose only waiter cancelled gets the content, not CancellationError")
    func joinAfterCancel() async throws {
        let device = try QueueHarness(
            customWatch: fixedWatch([try WatchedAttachmentItem(id: "v", fileExtension: "bin")])
        ) {
            $0.downloadPolicy = .onDemand
        }
        let remote = try device.memoryRemote
        await remote.setFile(testBytes(300_000), named: "v.bin")
        try await device.queue.startSync()
        try await device.waitForRecord("v")

        await remote.holdDownloads(atByte: 100_000)
        let queue = device.queue
        let first = Task { try await queue.download(attachmentId: "v") }
        await remote.waitForHeldDownload()
        // The user taps cancel, then opens it again while the first transfer is still winding down.
        first.cancel()
        let second = Task { try await queue.download(attachmentId: "v") }
        await #expect(throws: CancellationError.self) { try await first.value }
        await remote.release()
        let attachment = try await second.value
        #expect(attachment.contentAvailable)
        #expect(device.bytesOnDisk("v.bin") == testBytes(300_000))
    }

    @Test("a startup that failed once (a folder not creatable for a moment) is tried again by the next call")
    func startupIsRetried() async throws {
        let device = try QueueHarness(localStorage: FlakyFolderStorage(failures: 1))
        await #expect(throws: AttachmentError.self) { try await device.queue.waitForInit() }
        try await device.queue.waitForInit()
        let photo = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        #expect(device.bytesOnDisk(photo.filename) == testBytes(10))
    }

    @Test("once stopSync has returned no transfer starts, and a syncNow in progress returns")
    func nothingStartsAfterStopSync() async throws {
        let device = try QueueHarness { $0.maxConcurrentTransfers = 1 }
        let remote = try device.memoryRemote
        await remote.hold()
        let first = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        let second = try await device.queue.saveFile(data: testBytes(20), mediaType: nil, fileExtension: "jpg")
        let queue = device.queue
        let round = Task { try await queue.syncNow() }
        await remote.waitForInFlight(count: 1)

        await device.queue.stopSync()
        try await withDeadline("syncNow to return after stopSync") { try await round.value }
        await remote.release()
        try await waitFor("the interrupted call to end") { await remote.waitUntilNoCallInFlight() }
        // Give a stray transfer every chance to start: none may.
        for _ in 0..<50 { await Task.yield() }
        #expect(await remote.uploadCount == 1)
        #expect(try await device.state(of: first.id) == .queuedUpload)
        #expect(try await device.state(of: second.id) == .queuedUpload)

        try await device.queue.syncNow()
        #expect(try await device.state(of: first.id) == .synced)
        #expect(try await device.state(of: second.id) == .synced)
    }

    @Test("close waits for a save in progress: when it returns, the save is complete and consistent")
    func closeWaitsForSaves() async throws {
        let storage = GatedStorage()
        let device = try QueueHarness(localStorage: storage)
        try await device.queue.waitForInit()
        let order = LockedValue<[String]>([])
        let queue = device.queue
        let save = Task {
            let saved = try await queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
            order.withLock { $0.append("saved") }
            return saved
        }
        var arrived = storage.arrived.stream.makeAsyncIterator()
        _ = await arrived.next()
        let close = Task {
            await queue.close()
            order.withLock { $0.append("closed") }
        }
        // close must not return while the save is inside; let it try.
        for _ in 0..<200 where order.withLock({ $0.isEmpty }) { await Task.yield() }
        #expect(order.withLock { $0 }.isEmpty, "close returned while a save was in progress")
        storage.gate.continuation.yield()
        let saved = try await save.value
        await close.value
        #expect(order.withLock { $0 } == ["saved", "closed"])
        #expect(device.bytesOnDisk(saved.filename) == testBytes(10))
        await #expect(throws: AttachmentError.self) {
            try await queue.saveFile(data: testBytes(1), mediaType: nil, fileExtension: "jpg")
        }
    }

    @Test("a download interrupted between moving its file into place and its commit leaves no unclaimed file")
    func interruptedCommitLeavesNoOrphan() async throws {
        // Found by the model-based test (history 1813): the row went away while a download was between its
        // file and its commit; the record was archived and trimmed, the interrupted commit left `^r1.bin`
        // behind, and no startup could tell whose it was.
        let storage = PauseAfterMoveStorage(pausingAfterMovingTo: "v.jpg")
        let device = try QueueHarness(watch: true, localStorage: storage) { $0.archivedCacheLimit = 0 }
        try await device.memoryRemote.setFile(
            testBytes(5_000), named: "v.jpg", sha256: FileStreaming.sha256(testBytes(5_000)))
        try await device.addChecklist("c1", photo: "v")
        try await device.queue.startSync()
        var arrived = storage.arrived.stream.makeAsyncIterator()
        _ = await arrived.next()

        // The row goes away: the record is archived (which cancels its download), then trimmed.
        try await device.setPhoto(checklist: "c1", photo: nil)
        let states = try device.db.watch(sql: "SELECT state FROM attachments WHERE id = ?", parameters: ["v"]) {
            try $0.getInt(name: "state")
        }
        _ = try await withDeadline("v to be archived") {
            try await states.first { $0.allSatisfy { $0 == AttachmentState.archived.rawValue } }
        }
        storage.gate.continuation.yield()
        // Once the interrupted download has ended, a pass trims the archive (the limit is 0).
        _ = try await withDeadline("the interrupted download to end") {
            await device.queue.status.first { $0.transfers.isEmpty }
        }
        try await device.queue.syncNow()
        try await device.waitForState("v", nil)
        await device.queue.stopSync()

        #expect(try await device.queue.attachment(id: "v") == nil)
        #expect(try !device.filesOnDisk().contains("v.jpg"), "v.jpg is on disk and no record claims it")
    }
}
