import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// An error handler that records its calls and answers as told.
final class RecordingErrorHandler: SyncErrorHandler {
    let retry: Bool
    let calls = LockedValue<[String]>([])

    init(retry: Bool) { self.retry = retry }

    func onDownloadError(attachment: AttachmentSync.Attachment, error: any Error) async -> Bool {
        calls.withLock { $0.append("download \(attachment.id)") }
        return retry
    }

    func onUploadError(attachment: AttachmentSync.Attachment, error: any Error) async -> Bool {
        calls.withLock { $0.append("upload \(attachment.id)") }
        return retry
    }

    func onDeleteError(attachment: AttachmentSync.Attachment, error: any Error) async -> Bool {
        calls.withLock { $0.append("delete \(attachment.id)") }
        return retry
    }
}

/// Local storage whose `saveFile` fails a given number of times, to stand for a full or failing disk.
final class FlakyLocalStorage: ForwardingLocalStorage {
    let base = FileManagerStorageAdapter()
    let failuresLeft: LockedValue<Int>

    init(failures: Int) { failuresLeft = LockedValue(failures) }

    func saveFile(filePath: String, data: Data) async throws -> Int64 {
        let fail = failuresLeft.withLock { left in
            defer { left = max(0, left - 1) }
            return left > 0
        }
        if fail { throw AttachmentError(code: .fileSystem, message: "disk full (injected)", path: filePath) }
        return try await base.saveFile(filePath: filePath, data: data)
    }
}

@Suite("Transfer failures", .cleansUp)
struct FailureTests {
    @Test("a handler returning false archives the attachment")
    func handlerArchives() async throws {
        let handler = RecordingErrorHandler(retry: false)
        let device = try QueueHarness(errorHandler: handler)
        try await device.memoryRemote.setAlwaysFailing(.upload, with: InjectedFailure("rejected"))
        let saved = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        try await device.queue.syncNow()
        #expect(handler.calls.withLock { $0 } == ["upload \(saved.id)"])
        #expect(try await device.state(of: saved.id) == .archived)
        #expect(device.bytesOnDisk(saved.filename) == testBytes(10), "archiving keeps the local file")
    }

    @Test("a handler returning true keeps it queued; it is retried at the next trigger and succeeds")
    func handlerRetries() async throws {
        let handler = RecordingErrorHandler(retry: true)
        let device = try QueueHarness(watch: true, errorHandler: handler)
        let remote = try device.memoryRemote
        await remote.setFile(testBytes(10), named: "p1.jpg")
        await remote.failNext(.download, count: 1, with: InjectedFailure("flaky"))
        try await device.addChecklist("c1", photo: "p1")
        try await device.queue.startSync()
        try await waitUntil("the failed download") { handler.calls.withLock { $0 } == ["download p1"] }
        await device.queue.waitUntilIdle()  // the failure is booked; the next trigger retries it
        try await device.queue.syncNow()
        #expect(try await device.state(of: "p1") == .synced)
        #expect(device.bytesOnDisk("p1.jpg") == testBytes(10))
        #expect(handler.calls.withLock { $0 } == ["download p1"])
    }

    @Test("without a handler a failure is retried at the next trigger, not in a loop")
    func noHandlerRetriesAtNextTrigger() async throws {
        let device = try QueueHarness()
        let remote = try device.memoryRemote
        await remote.failNext(.upload, count: 2, with: InMemoryRemoteStorage.offlineError)
        let saved = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        try await device.queue.syncNow()
        #expect(await remote.uploadCount == 1)
        #expect(try await device.state(of: saved.id) == .queuedUpload)
        try await device.queue.syncNow()
        #expect(await remote.uploadCount == 2)
        try await device.queue.syncNow()
        #expect(await remote.uploadCount == 3)
        #expect(try await device.state(of: saved.id) == .synced)
    }

    @Test("a failing disk fails that download only; the loop keeps running and later succeeds")
    func loopSurvivesDiskErrors() async throws {
        let device = try QueueHarness(watch: true, localStorage: FlakyLocalStorage(failures: 1))
        let remote = try device.memoryRemote
        await remote.setFile(testBytes(10, seed: 1), named: "p1.jpg")
        await remote.setFile(testBytes(10, seed: 2), named: "p2.jpg")
        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: "p1")
        try await waitFor("the first download attempt") { await remote.waitForCalls(.download, count: 1) }
        try await device.addChecklist("c2", photo: "p2")  // a table change: the next trigger
        try await device.waitForState("p2", .synced)
        try await device.waitForState("p1", .synced)
        #expect(device.bytesOnDisk("p1.jpg") == testBytes(10, seed: 1))
        #expect(device.bytesOnDisk("p2.jpg") == testBytes(10, seed: 2))
        #expect(try device.filesOnDisk() == ["p1.jpg", "p2.jpg"], "no staging file is left behind")
    }

    @Test("a failing watch is restarted after a pause, and the loop keeps going")
    func watchRestarts() async throws {
        let folder = try TemporaryDirectory()
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: QueueHarness.schema)
        let remote = InMemoryRemoteStorage()
        await remote.setFile(testBytes(10), named: "p1.jpg")
        let clock = ManualClock()
        let attempts = LockedValue(0)
        var configuration = AttachmentQueue.Configuration(attachmentsDirectory: folder.path("files"))
        configuration.clock = clock
        configuration.syncInterval = .zero
        configuration.syncThrottleDuration = .zero
        let queue = AttachmentQueue(db: db, remoteStorage: remote, configuration: configuration) {
            let attempt = attempts.withLock { count in
                count += 1
                return count
            }
            if attempt == 1 { throw InjectedFailure("watch unavailable") }
            return try QueueHarness.watchPhotos(db)()
        }
        TestCleanup.add { await queue.close() }
        try await db.execute(sql: "INSERT INTO checklists (id, photo_id) VALUES ('c1', 'p1')")
        try await queue.startSync()
        await clock.waitForSleepers(count: 1)  // the pause before the retry
        #expect(attempts.withLock { $0 } == 1)
        await clock.advance(by: .seconds(1))
        let states = try db.watch(sql: "SELECT state FROM attachments WHERE id = 'p1'") { try $0.getInt(name: "state") }
        _ = try await withDeadline("p1 synced") { try await states.first { $0 == [AttachmentState.synced.rawValue] } }
        #expect(attempts.withLock { $0 } == 2)
    }

    @Test("stopSync interrupts a transfer without reporting it as an error")
    func cancellationIsNotAnError() async throws {
        let handler = RecordingErrorHandler(retry: false)
        let device = try QueueHarness(errorHandler: handler)
        let remote = try device.memoryRemote
        let saved = try await device.startStuckUpload()

        await device.queue.stopSync()
        try await waitFor("the interrupted call to end") { await remote.waitUntilNoCallInFlight() }
        #expect(handler.calls.withLock { $0 }.isEmpty)
        #expect(try await device.state(of: saved.id) == .queuedUpload)
        await remote.release()

        try await device.queue.startSync()
        try await device.waitForState(saved.id, .synced)
    }
}
