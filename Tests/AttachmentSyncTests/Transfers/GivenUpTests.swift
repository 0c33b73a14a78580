import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// A transfer given up (after `maxAttempts`, or because the error handler said so) is archived, but an
/// upload given up holds the only copy of its file: nothing that trims a cache may touch it, and it goes
/// back to the remote, not to `synced`, when asked or when a row refers to it again.
@Suite("Given-up transfers", .cleansUp)
struct GivenUpTests {
    @Test("an upload given up keeps its file through trimming, expireCache, the byte budget and purge")
    func givenUpUploadIsNeverEvicted() async throws {
        let device = try QueueHarness {
            $0.maxAttempts = 1
            $0.archivedCacheLimit = 0
            $0.maxCacheBytes = 1
        }
        let remote = try device.memoryRemote
        await remote.setAlwaysFailing(.upload, with: InjectedFailure("rejected"))
        let events = device.queue.events
        let photo = try await device.queue.saveFile(data: testBytes(5000), mediaType: nil, fileExtension: "jpg")
        try await device.queue.syncNow()

        let given = try #require(try await device.queue.attachment(id: photo.id))
        #expect(given.state == .archived)
        #expect(given.givenUp == .queuedUpload)
        #expect(given.isLocalOnly)
        let gaveUp = try await withDeadline("the give-up event") {
            await events.first { if case .gaveUp = $0 { true } else { false } }
        }
        #expect(gaveUp?.attachmentId == photo.id)

        // Every way the cache is trimmed.
        try await device.queue.expireCache()
        try await device.queue.syncNow()  // trims the archive and enforces the budget
        let purge = await #expect(throws: AttachmentError.self) { try await device.queue.purge(attachmentId: photo.id) }
        #expect(purge?.code == .invalidState)
        #expect(device.bytesOnDisk(photo.filename) == testBytes(5000), "the only copy is still here")
        #expect(try await device.state(of: photo.id) == .archived)

        // Visible in the status stream.
        let status = try #require(await device.queue.status.first { _ in true })
        #expect(status.givenUp.map(\.attachmentId) == [photo.id])
        #expect(status.givenUp.first?.isLocalOnly == true)
        #expect(status.givenUp.first?.state == .queuedUpload)
        #expect(status.localOnly == QueueStatus.Totals(count: 1, bytes: 5000))

        // The remote heals; the app retries: uploaded, synced.
        await remote.setAlwaysFailing(with: nil)
        let retried = try await device.queue.retry(attachmentId: photo.id)
        #expect(retried.state == .queuedUpload)
        try await device.queue.syncNow()
        #expect(try await device.state(of: photo.id) == .synced)
        #expect(await remote.file(named: photo.filename) == testBytes(5000))
        let synced = try #require(try await device.queue.attachment(id: photo.id))
        #expect(synced.givenUp == nil && synced.hasSynced && !synced.isLocalOnly)
    }

    @Test("archived content that never reached the remote is uploaded when a row refers to it again")
    func rereferencedLocalOnlyIsUploadedNotSynced() async throws {
        let handler = RecordingErrorHandler(retry: false)
        let device = try QueueHarness(watch: true, errorHandler: handler)
        let remote = try device.memoryRemote
        await remote.failNext(.upload, with: InjectedFailure("rejected"))
        try await device.addChecklist("c1", photo: nil)
        try await device.queue.startSync()
        let photo = try await device.queue.saveFile(data: testBytes(700), mediaType: nil, fileExtension: "jpg") {
            tx, attachment in
            try tx.execute(sql: "UPDATE checklists SET photo_id = ? WHERE id = 'c1'", arguments: [attachment.id])
        }
        try await device.waitForColumn("given_up", of: photo.id, toBe: "\(AttachmentState.queuedUpload.rawValue)")
        // While the row still refers to it, it stays given up: no loop behind the handler's back.
        try await device.queue.syncNow()
        #expect(await remote.uploadCount == 1)
        #expect(try await device.state(of: photo.id) == .archived)

        // The row lets go of it, then refers to it again: it must be uploaded, not "restored" to synced.
        await remote.hold()
        try await device.setPhoto(checklist: "c1", photo: nil)
        try await device.queue.syncNow()
        try await device.setPhoto(checklist: "c1", photo: photo.id)
        try await device.waitForState(photo.id, .queuedUpload)
        #expect(await remote.file(named: photo.filename) == nil)
        await remote.release()
        try await device.waitForState(photo.id, .synced)
        #expect(await remote.file(named: photo.filename) == testBytes(700))
        #expect(device.bytesOnDisk(photo.filename) == testBytes(700))
    }

    @Test("retryAll queues every given-up transfer again and brings waiting ones forward")
    func retryAll() async throws {
        let device = try QueueHarness {
            $0.maxAttempts = 1
            $0.retryBackoff = RetryBackoff(initialDelay: .seconds(60), maximumDelay: .seconds(60), jitter: false)
        }
        let remote = try device.memoryRemote
        await remote.failNext(.upload, count: 2, with: InjectedFailure("down"))
        let first = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        let second = try await device.queue.saveFile(data: testBytes(20), mediaType: nil, fileExtension: "jpg")
        try await device.queue.syncNow()
        #expect(try await device.queue.attachment(id: first.id)?.givenUp == .queuedUpload)
        #expect(try await device.queue.attachment(id: second.id)?.givenUp == .queuedUpload)

        #expect(try await device.queue.retryAll() == 2)
        try await device.queue.syncNow()
        #expect(try await device.state(of: first.id) == .synced)
        #expect(try await device.state(of: second.id) == .synced)
        #expect(try await device.queue.retryAll() == 0)
        await #expect(throws: AttachmentError.self) { try await device.queue.retry(attachmentId: first.id) }
    }

    @Test("a remote delete given up keeps the record (the remote copy stays) until retried")
    func givenUpDelete() async throws {
        let device = try QueueHarness { $0.maxAttempts = 1 }
        let remote = try device.memoryRemote
        let photo = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        try await device.queue.syncNow()
        await remote.failNext(.delete, with: InjectedFailure("forbidden"))
        try await device.queue.deleteFile(attachmentId: photo.id)
        try await device.queue.syncNow()

        let given = try #require(try await device.queue.attachment(id: photo.id))
        #expect(given.state == .archived && given.givenUp == .queuedDelete)
        #expect(given.localUri == nil, "the local copy was deleted")
        #expect(try device.filesOnDisk().isEmpty)
        try await device.queue.expireCache()
        #expect(try await device.state(of: photo.id) == .archived, "not evicted: it tells the remote copy is left")
        // A row referring to the id again does not undo the delete the app asked for.
        await device.queue.reconcile([])
        await device.queue.reconcile([try WatchedAttachmentItem(id: photo.id, fileExtension: "jpg")])
        try await device.queue.syncNow()
        #expect(try await device.queue.attachment(id: photo.id)?.givenUp == .queuedDelete)
        #expect(await remote.downloadCount == 0)

        try await device.queue.retry(attachmentId: photo.id)
        try await device.queue.syncNow()
        #expect(try await device.state(of: photo.id) == nil)
        #expect(await remote.file(named: photo.filename) == nil)
    }
}
