import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// A row that arrives before its file: the download finds nothing, and the attachment waits for the other
/// device's upload (visibly, on its own backoff, without spending attempts) instead of being archived.
@Suite("Not uploaded yet", .cleansUp)
struct NotUploadedYetTests {
    static let wait = RetryBackoff(initialDelay: .seconds(60), maximumDelay: .seconds(240), jitter: false)

    func record(_ device: QueueHarness, _ id: String) async throws -> AttachmentRecord {
        let store = AttachmentStore(table: "attachments")
        return try #require(try await device.db.readTransaction { tx in try store.record(id: id, in: tx) })
    }

    @Test("the download waits on its own backoff, spends no attempt, is never archived, and runs once the file lands")
    func waitsForTheUpload() async throws {
        let device = try QueueHarness(watch: true) { configuration in
            configuration.maxAttempts = 2
            configuration.notUploadedYetBackoff = Self.wait
        }
        let remote = try device.memoryRemote
        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: "p1")
        try await device.waitForColumn("awaiting_upload", of: "p1", toBe: "1")
        var record = try await record(device, "p1")
        #expect(record.state == .queuedDownload)
        #expect(record.attempts == 0)
        #expect(record.nextAttemptAt == clampedMilliseconds(device.clock.date) + 60_000)

        // Asking again (syncNow each time) grows the wait, far past maxAttempts, without archiving.
        for expected in 2...5 {
            try await device.queue.syncNow()
            record = try await self.record(device, "p1")
            #expect(record.awaitingUpload == expected)
        }
        #expect(record.state == .queuedDownload && record.attempts == 0 && record.givenUp == nil)
        #expect(record.nextAttemptAt == clampedMilliseconds(device.clock.date) + 240_000, "capped")
        let status = try #require(await device.queue.status.first { _ in true })
        #expect(status.awaitingUpload.map(\.attachmentId) == ["p1"])
        #expect(status.awaitingUpload.first?.awaitingUpload == 5)

        // A network failure ends the count; it spends no attempt either (it is the network's, not the
        // transfer's), and is counted as such.
        await remote.failNext(.download, count: 1, with: InMemoryRemoteStorage.offlineError)
        try await device.queue.syncNow()
        record = try await self.record(device, "p1")
        #expect(record.attempts == 0 && record.awaitingUpload == nil && record.connectivityFailures == 1)

        // The other device's upload lands; the next ask fetches it.
        await remote.setFile(testBytes(2_000), named: "p1.jpg")
        _ = try await device.queue.retry(attachmentId: "p1")
        try await device.queue.syncNow()
        #expect(try await device.state(of: "p1") == .synced)
        #expect(device.bytesOnDisk("p1.jpg") == testBytes(2_000))
        record = try await self.record(device, "p1")
        #expect(record.awaitingUpload == nil && record.attempts == 0 && record.nextAttemptAt == nil)
        await device.queue.close()
    }

    @Test("a change to the watched rows asks again at once, without waiting for the backoff")
    func watchEmissionBringsItForward() async throws {
        let device = try QueueHarness(watch: true) { $0.notUploadedYetBackoff = Self.wait }
        let remote = try device.memoryRemote
        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: "p1")
        try await device.waitForColumn("awaiting_upload", of: "p1", toBe: "1")
        await remote.setFile(testBytes(700), named: "p1.jpg")
        // Spaced out on the queue's clock: emissions within 5 s of the last ask do not ask again.
        await device.clock.advance(by: .seconds(6))
        try await device.addChecklist("c2", photo: "p2")
        try await device.waitForState("p1", .synced)
        #expect(device.bytesOnDisk("p1.jpg") == testBytes(700))
        await device.queue.close()
    }

    @Test("an error handler that gives up still decides; without one, maxAttempts never archives the wait")
    func handlerStillDecides() async throws {
        let device = try QueueHarness(watch: true, errorHandler: GiveUpOnNotFound()) {
            $0.notUploadedYetBackoff = Self.wait
        }
        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: "p1")
        try await device.waitForState("p1", .archived)
        #expect(try await record(device, "p1").givenUp == .queuedDownload)
        await device.queue.close()
    }

    @Test("waitUntilUploaded returns once the upload lands, times out on the queue's clock, and says why not")
    func waitUntilUploaded() async throws {
        let device = try QueueHarness { $0.maxAttempts = 1 }
        let remote = try device.memoryRemote
        let saved = try await device.queue.saveFile(data: testBytes(500), mediaType: nil, fileExtension: "jpg")
        let waiter = Task { try await device.queue.waitUntilUploaded(attachmentId: saved.id, timeout: .seconds(30)) }
        try await device.queue.syncNow()
        let uploaded = try await waiter.value
        #expect(uploaded.hasSynced && uploaded.state == .synced)
        #expect(try await device.queue.waitUntilUploaded(attachmentId: saved.id, timeout: .zero).hasSynced)

        let pending = try await device.queue.saveFile(data: testBytes(50), mediaType: nil, fileExtension: "jpg")
        let sleepersBefore = device.clock.sleeperCount
        let late = Task { try await device.queue.waitUntilUploaded(attachmentId: pending.id, timeout: .seconds(10)) }
        await device.clock.waitForSleepers(count: sleepersBefore + 1)
        await device.clock.advance(by: .seconds(10))
        let timedOut = await #expect(throws: AttachmentError.self) { try await late.value }
        #expect(timedOut?.code == .timedOut)
        #expect(try await device.state(of: pending.id) == .queuedUpload, "nothing changed")

        // A failed try (not the network's, which spends none) with maxAttempts 1 gives the upload up.
        await remote.failNext(.upload, count: 1, with: InjectedFailure("the server refused it"))
        try await device.queue.syncNow()
        let givenUp = await #expect(throws: AttachmentError.self) {
            try await device.queue.waitUntilUploaded(attachmentId: pending.id, timeout: .seconds(10))
        }
        #expect(givenUp?.code == .invalidState)
        let missing = await #expect(throws: AttachmentError.self) {
            try await device.queue.waitUntilUploaded(attachmentId: "nope", timeout: .seconds(10))
        }
        #expect(missing?.code == .attachmentNotFound)
        await device.queue.close()
    }

    @Test("the policy: the handler decides, the wait follows its own backoff, attempts do not matter")
    func policy() {
        let policy = FailurePolicy(
            retryBackoff: RetryBackoff(initialDelay: .seconds(1), maximumDelay: .seconds(2), jitter: false),
            maxAttempts: 1, notUploadedYetBackoff: Self.wait)
        var generator = SplitMix64(seed: 26)
        #expect(
            policy.decideNotUploadedYet(wait: 1, handlerRetries: true, now: 1_000, using: &generator)
                == .retry(at: 61_000))
        #expect(
            policy.decideNotUploadedYet(wait: 3, handlerRetries: true, now: 0, using: &generator) == .retry(at: 240_000)
        )
        #expect(
            policy.decideNotUploadedYet(wait: 50, handlerRetries: true, now: 0, using: &generator)
                == .retry(at: 240_000))
        #expect(
            policy.decideNotUploadedYet(wait: 1, handlerRetries: false, now: 0, using: &generator) == .giveUpByHandler)
    }
}

/// Gives up a transfer whose remote file is not found; retries anything else.
private struct GiveUpOnNotFound: SyncErrorHandler {
    func onDownloadError(attachment: AttachmentSync.Attachment, error: any Error) async -> Bool {
        (error as? AttachmentError)?.code != .remoteNotFound
    }
    func onUploadError(attachment: AttachmentSync.Attachment, error: any Error) async -> Bool { true }
    func onDeleteError(attachment: AttachmentSync.Attachment, error: any Error) async -> Bool { true }
}

/// Two devices over one real folder remote: the row reaches the second before the file does.
@Suite("Not uploaded yet, two devices on a folder remote", .cleansUp)
struct NotUploadedYetFolderTests {
    @Test("device B waits for A's upload without giving up, then downloads the same bytes")
    func rowBeforeFile() async throws {
        let remoteFolder = try TemporaryDirectory()
        let remote = FileSystemRemoteStorage(directory: remoteFolder.path("remote"))
        let configure: (inout AttachmentQueue.Configuration) -> Void = {
            $0.maxAttempts = 1
            $0.notUploadedYetBackoff = NotUploadedYetTests.wait
        }
        let phoneA = try QueueHarness(watch: true, remote: remote, configure: configure)
        let phoneB = try QueueHarness(watch: true, remote: remote, configure: configure)
        try await phoneB.queue.startSync()
        // The row syncs to B first; A has saved nothing yet.
        try await phoneB.addChecklist("c1", photo: "shared")
        try await phoneB.waitForColumn("awaiting_upload", of: "shared", toBe: "1")
        try await phoneB.queue.syncNow()
        try await phoneB.queue.syncNow()
        #expect(try await phoneB.state(of: "shared") == .queuedDownload, "maxAttempts 1 does not archive it")

        let photo = testBytes(9_000, seed: 3)
        _ = try await phoneA.queue.saveFile(data: photo, mediaType: nil, fileExtension: "jpg", id: "shared") { tx, a in
            try tx.execute(
                sql: "INSERT INTO checklists (id, description, completed, photo_id) VALUES ('c1', 'x', 0, ?)",
                arguments: [a.id])
        }
        try await phoneA.queue.syncNow()
        try await phoneB.queue.syncNow()
        #expect(try await phoneB.state(of: "shared") == .synced)
        #expect(phoneB.bytesOnDisk("shared.jpg") == photo)
        await phoneA.queue.close()
        await phoneB.queue.close()
    }
}
