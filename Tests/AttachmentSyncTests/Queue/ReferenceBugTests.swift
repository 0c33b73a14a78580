import AttachmentSyncTesting
import Foundation
import Testing

@testable import AttachmentSync

/// The reference implementation's known bugs, each fixed here and pinned by a test.
@Suite("Reference implementation bugs, fixed", .cleansUp)
struct ReferenceBugTests {
    @Test("saveFile persists metaData")
    func metaDataPersisted() async throws {
        let device = try QueueHarness()
        let saved = try await device.queue.saveFile(
            data: Data("x".utf8), mediaType: "text/plain", fileExtension: "txt", metaData: #"{"k":1}"#)
        let stored = try await device.db.get(
            sql: "SELECT meta_data FROM attachments WHERE id = ?", parameters: [saved.id]
        ) {
            try $0.getString(name: "meta_data")
        }
        #expect(stored == #"{"k":1}"#)
    }

    @Test("a watched item's filename and metaData are honoured for new downloads")
    func watchedFieldsHonoured() throws {
        let item = try WatchedAttachmentItem(
            id: "a1", filename: "contract.pdf", metaData: "m", mediaType: "application/pdf")
        let decision = Reconciler(policy: .eager).reconcile(items: [item], records: [:])
        #expect(decision.inserts.map(\.filename) == ["contract.pdf"])
        #expect(decision.inserts.map(\.metaData) == ["m"])
        #expect(decision.inserts.map(\.mediaType) == ["application/pdf"])
    }

    @Test("syncInterval 0 disables the periodic sync instead of spinning")
    func zeroIntervalDoesNotSpin() async throws {
        let device = try QueueHarness { $0.syncInterval = .zero }
        let remote = try device.memoryRemote
        await remote.setAlwaysFailing(with: InMemoryRemoteStorage.offlineError)
        _ = try await device.queue.saveFile(data: Data("x".utf8), mediaType: nil, fileExtension: "txt")
        try await device.queue.startSync()
        try await waitFor("the startup attempt") { await remote.waitForCalls(.upload, count: 1) }
        await device.queue.waitUntilIdle()
        #expect(device.clock.sleeperCount == 0, "no timer may exist")
        await device.clock.advance(by: .seconds(3600))
        for _ in 0..<100 { await Task.yield() }
        await device.queue.waitUntilIdle()
        #expect(await remote.uploadCount == 1)
    }

    @Test("closing twice is fine")
    func closeTwice() async throws {
        let device = try QueueHarness()
        try await device.queue.startSync()
        let events = device.queue.events
        await device.queue.close()
        await device.queue.close()
        await #expect(throws: AttachmentError.self) {
            try await device.queue.saveFile(data: Data("x".utf8), mediaType: nil, fileExtension: "txt")
        }
        #expect(await events.first { _ in true } == nil, "the event stream ended with the first close")
        try await device.db.close()
        #expect(device.db.isClosed, "nothing of the queue kept the database busy")
    }

    @Test("deleteFile cannot orphan the remote copy: the record stays until the remote delete succeeds")
    func deleteKeepsRecordUntilRemoteDelete() async throws {
        let handler = RecordingErrorHandler(retry: true)
        let device = try QueueHarness(errorHandler: handler)
        let remote = try device.memoryRemote
        let saved = try await device.queue.saveFile(data: Data("x".utf8), mediaType: nil, fileExtension: "txt")
        try await device.queue.syncNow()
        await remote.failNext(.delete, count: 1, with: InMemoryRemoteStorage.offlineError)
        try await device.queue.deleteFile(attachmentId: saved.id) { _, _ in }
        try await device.queue.syncNow()
        #expect(try await device.state(of: saved.id) == .queuedDelete)
        #expect(await remote.file(named: saved.filename) != nil)
        try await device.queue.syncNow()
        #expect(try await device.state(of: saved.id) == nil)
        #expect(await remote.file(named: saved.filename) == nil)
    }

    @Test("the sync loop survives an error in a pass")
    func loopSurvivesPassErrors() async throws {
        let device = try QueueHarness()
        try await device.queue.startSync()
        // A corrupt queued row (a timestamp that is not a number) makes every read of the queued records
        // fail until it is repaired.
        try await device.db.execute(
            sql: "INSERT INTO attachments (id, filename, state, timestamp) VALUES ('bad', 'bad.jpg', 1, 'garbage')")
        let saved = try await device.queue.saveFile(data: Data("x".utf8), mediaType: nil, fileExtension: "txt")
        try await device.queue.syncNow()
        #expect(try await device.state(of: saved.id) == .queuedUpload)
        try await device.db.execute(sql: "DELETE FROM attachments WHERE id = 'bad'")
        try await device.waitForState(saved.id, .synced)
    }
}
