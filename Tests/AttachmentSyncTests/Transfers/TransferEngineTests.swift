import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// A handler that records the attempt counts it is given and always retries.
final class AttemptRecordingHandler: SyncErrorHandler {
    let attempts = LockedValue<[Int]>([])

    func shouldRetry(attachment: AttachmentSync.Attachment, error: any Error, attempt: Int) async -> Bool {
        attempts.withLock { $0.append(attempt) }
        return true
    }
    func onDownloadError(attachment: AttachmentSync.Attachment, error: any Error) async -> Bool { false }
    func onUploadError(attachment: AttachmentSync.Attachment, error: any Error) async -> Bool { false }
    func onDeleteError(attachment: AttachmentSync.Attachment, error: any Error) async -> Bool { false }
}

/// A remote written against the seed API only: the three `Data` methods.
final class SeedStyleRemote: RemoteStorageAdapter {
    let files = LockedValue<[String: Data]>([:])

    func uploadFile(data: Data, attachment: AttachmentSync.Attachment) async throws {
        files.withLock { $0[attachment.filename] = data }
    }
    func downloadFile(attachment: AttachmentSync.Attachment) async throws -> Data {
        guard let data = files.withLock({ $0[attachment.filename] }) else {
            throw AttachmentError(code: .remoteNotFound, message: "missing", attachmentId: attachment.id)
        }
        return data
    }
    func deleteFile(attachment: AttachmentSync.Attachment) async throws {
        _ = files.withLock { $0.removeValue(forKey: attachment.filename) }
    }
}

struct RetryState: Equatable {
    var attempts: Int
    var nextAttemptAt: Int64?
    var lastError: String?
}

extension QueueHarness {
    func retryState(of id: String) async throws -> RetryState {
        try await db.get(
            sql: "SELECT attempts, next_attempt_at, last_error FROM attachments WHERE id = ?", parameters: [id]
        ) {
            RetryState(
                attempts: try $0.getIntOptional(name: "attempts") ?? 0,
                nextAttemptAt: try $0.getInt64Optional(name: "next_attempt_at"),
                lastError: try $0.getStringOptional(name: "last_error"))
        }
    }

    var nowMilliseconds: Int64 { Int64((clock.date.timeIntervalSince1970 * 1000).rounded(.down)) }
}

@Suite("Transfer engine: backoff, attempts, streaming, integrity", .cleansUp)
struct TransferEngineTests {
    @Test("backoff bounds double from the initial delay to the cap; jitter stays below the bound")
    func backoffBounds() {
        let backoff = RetryBackoff(initialDelay: .seconds(1), maximumDelay: .seconds(300))
        #expect(
            (1...11).map { backoff.bound(afterAttempt: $0) }
                == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300].map { Duration.seconds($0) })
        #expect(backoff.bound(afterAttempt: 10_000) == .seconds(300))
        var generator = SplitMix64(seed: 26)
        // Jitter from a seeded generator: many draws, the same on every run.
        for attempt in 1...12 {
            for _ in 0..<50 {
                let delay = backoff.delay(afterAttempt: attempt, using: &generator)
                #expect(delay >= .zero && delay <= backoff.bound(afterAttempt: attempt))
            }
        }
        var fixed = RetryBackoff(initialDelay: .milliseconds(500), maximumDelay: .seconds(2))
        fixed.jitter = false
        #expect(fixed.delay(afterAttempt: 3, using: &generator) == .seconds(2))
    }

    @Test("a failure is booked with its attempt, retry time and error, and the retry waits for that time")
    func backoffIsPersistedAndHonoured() async throws {
        let device = try QueueHarness {
            $0.retryBackoff = RetryBackoff(initialDelay: .seconds(10), maximumDelay: .seconds(60), jitter: false)
        }
        let remote = try device.memoryRemote
        await remote.failNext(.upload, count: 1, with: InjectedFailure("server busy"))
        let saved = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        let start = device.nowMilliseconds
        try await device.queue.syncNow()

        let booked = try await device.retryState(of: saved.id)
        #expect(booked.attempts == 1)
        #expect(booked.nextAttemptAt == start + 10_000)
        #expect(booked.lastError?.contains("server busy") == true)

        try await device.queue.syncNow()
        #expect(await remote.uploadCount == 1, "not before its retry time")
        await device.clock.advance(by: .seconds(10))
        try await device.queue.syncNow()
        #expect(await remote.uploadCount == 2)
        #expect(try await device.state(of: saved.id) == .synced)
        #expect(
            try await device.retryState(of: saved.id) == RetryState(attempts: 0, nextAttemptAt: nil, lastError: nil))
        await device.close()
    }

    @Test("the retry time survives a restart")
    func backoffSurvivesRestart() async throws {
        let folder = try TemporaryDirectory()
        let remote = InMemoryRemoteStorage()
        let backoff = RetryBackoff(initialDelay: .seconds(30), maximumDelay: .seconds(60), jitter: false)
        let first = try QueueHarness(folder: folder, remote: remote) { $0.retryBackoff = backoff }
        await remote.failNext(.upload, count: 1, with: InMemoryRemoteStorage.offlineError)
        let saved = try await first.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        try await first.queue.syncNow()
        await first.close()

        let second = try QueueHarness(folder: folder, remote: remote) { $0.retryBackoff = backoff }
        try await second.queue.syncNow()
        #expect(await remote.uploadCount == 1, "the new queue honours the stored retry time")
        await second.clock.advance(by: .seconds(30))
        try await second.queue.syncNow()
        #expect(try await second.state(of: saved.id) == .synced)
        await second.close()
    }

    @Test("offline, tries follow the backoff however often sync is triggered, and spend no attempt")
    func offlineDoesNotBurnAttempts() async throws {
        let device = try QueueHarness {
            $0.retryBackoff = RetryBackoff(initialDelay: .seconds(1), maximumDelay: .seconds(60), jitter: false)
        }
        let remote = try device.memoryRemote
        await remote.setAlwaysFailing(with: InMemoryRemoteStorage.offlineError)
        let saved = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        // Ten seconds of a trigger every 100 ms: tries at 0, 1, 3 and 7 s (waits of 1, 2, 4, then 8 s).
        for _ in 0..<100 {
            try await device.queue.syncNow()
            await device.clock.advance(by: .milliseconds(100))
        }
        #expect(await remote.uploadCount == 4)
        #expect(try await device.retryState(of: saved.id).attempts == 0, "the network's failures are no attempts")
        try await device.waitForColumn("connectivity_failure", of: saved.id, toBe: "4")
        await device.close()
    }

    @Test("the background loop wakes by itself when a retry time comes")
    func retryTimerWakesTheLoop() async throws {
        let device = try QueueHarness {
            $0.retryBackoff = RetryBackoff(initialDelay: .seconds(5), maximumDelay: .seconds(5), jitter: false)
        }
        let remote = try device.memoryRemote
        await remote.failNext(.upload, count: 1, with: InMemoryRemoteStorage.offlineError)
        let saved = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        try await device.queue.startSync()
        try await device.waitForColumn("connectivity_failure", of: saved.id, toBe: "1")
        await device.queue.waitUntilIdle()
        await device.clock.waitForSleepers(count: 1)  // the retry timer
        await device.clock.advance(by: .seconds(5))
        try await device.waitForState(saved.id, .synced)
        #expect(await remote.uploadCount == 2)
        await device.close()
    }

    @Test("maxAttempts archives the attachment after that many failures; the handler sees each attempt")
    func maxAttemptsArchives() async throws {
        let handler = AttemptRecordingHandler()
        let device = try QueueHarness(errorHandler: handler) { $0.maxAttempts = 3 }
        let remote = try device.memoryRemote
        await remote.setAlwaysFailing(.upload, with: InjectedFailure("rejected"))
        let saved = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        for _ in 0..<5 { try await device.queue.syncNow() }

        #expect(handler.attempts.withLock { $0 } == [1, 2, 3])
        #expect(await remote.uploadCount == 3)
        #expect(try await device.state(of: saved.id) == .archived)
        #expect(try await device.retryState(of: saved.id).lastError?.contains("rejected") == true)
        #expect(device.bytesOnDisk(saved.filename) == testBytes(10), "giving up keeps the local file")
        await device.close()
    }

    @Test("a download that does not match the stored SHA-256 is discarded, never synced, and retried")
    func integrityMismatch() async throws {
        let folder = try TemporaryDirectory()
        let remote = InMemoryRemoteStorage()
        let first = try QueueHarness(folder: folder, remote: remote)
        let saved = try await first.queue.saveFile(data: testBytes(4096), mediaType: nil, fileExtension: "bin")
        try await first.queue.syncNow()
        #expect(saved.contentHash == FileStreaming.sha256(testBytes(4096)))
        await first.close()

        // The local copy is lost and the remote copy corrupted.
        try FileManager.default.removeItem(atPath: folder.path("attachments/\(saved.filename)"))
        await remote.setFile(testBytes(4096, seed: 99), named: saved.filename)

        let second = try QueueHarness(folder: folder, remote: remote)
        try await second.queue.syncNow()
        #expect(try await second.state(of: saved.id) == .queuedDownload)
        let booked = try await second.retryState(of: saved.id)
        #expect(booked.attempts == 1)
        #expect(booked.lastError?.contains("integrityMismatch") == true)
        #expect(try second.filesOnDisk().isEmpty, "the bad bytes are not kept, under any name")

        await remote.setFile(testBytes(4096), named: saved.filename)
        try await second.queue.syncNow()
        #expect(try await second.state(of: saved.id) == .synced)
        #expect(second.bytesOnDisk(saved.filename) == testBytes(4096))
        await second.close()
    }

    @Test("files larger than any buffer stream through saveFile(fileURL:) and the folder remote intact")
    func streamsLargeFiles() async throws {
        let folder = try TemporaryDirectory()
        let remoteFolder = folder.path("remote")
        let device = try QueueHarness(folder: folder, remote: FileSystemRemoteStorage(directory: remoteFolder))
        let source = folder.url.appendingPathComponent("video.mp4")
        let bytes = testBytes(5 * (1 << 20) + 12_345)  // five chunks and a bit
        try bytes.write(to: source)

        let saved = try await device.queue.saveFile(fileURL: source, mediaType: "video/mp4")
        #expect(saved.filename == "\(saved.id).mp4")
        #expect(saved.size == Int64(bytes.count))
        #expect(saved.contentHash == FileStreaming.sha256(bytes))
        #expect(FileManager.default.fileExists(atPath: source.path), "copied, not moved")
        try await device.queue.syncNow()
        #expect(FileManager.default.contents(atPath: "\(remoteFolder)/\(saved.filename)") == bytes)

        // Lose the local copy; the re-download streams back and is verified.
        try FileManager.default.removeItem(atPath: try #require(saved.localUri))
        await device.close()
        let again = try QueueHarness(folder: folder, remote: FileSystemRemoteStorage(directory: remoteFolder))
        try await again.queue.syncNow()
        #expect(try await again.state(of: saved.id) == .synced)
        #expect(again.bytesOnDisk(saved.filename) == bytes)
        await again.close()
    }

    @Test("moveFile adopts the file; when the hook throws, the file goes back where it was")
    func moveFile() async throws {
        struct HookFailure: Error {}
        let device = try QueueHarness()
        let source = device.folder.url.appendingPathComponent("scan.pdf")
        try testBytes(3000).write(to: source)

        await #expect(throws: HookFailure.self) {
            try await device.queue.saveFile(fileURL: source, mediaType: "application/pdf", moveFile: true) { _, _ in
                throw HookFailure()
            }
        }
        #expect(FileManager.default.contents(atPath: source.path) == testBytes(3000))
        #expect(try device.filesOnDisk().isEmpty)
        #expect(try await device.queue.allAttachments().isEmpty)

        let saved = try await device.queue.saveFile(fileURL: source, mediaType: "application/pdf", moveFile: true)
        #expect(!FileManager.default.fileExists(atPath: source.path))
        #expect(device.bytesOnDisk(saved.filename) == testBytes(3000))
        let missing = await #expect(throws: AttachmentError.self) {
            try await device.queue.saveFile(fileURL: source, mediaType: nil)
        }
        #expect(missing?.code == .localFileNotFound)
        await device.close()
    }

    @Test("a seed-style adapter with only the three Data methods still uploads and downloads")
    func seedStyleAdapter() async throws {
        let remote = SeedStyleRemote()
        let device = try QueueHarness(watch: true, remote: remote)
        remote.files.withLock { $0["p1.jpg"] = testBytes(2000, seed: 5) }
        try await device.addChecklist("c1", photo: nil)
        let saved = try await device.queue.saveFile(data: testBytes(1500), mediaType: nil, fileExtension: "jpg") {
            tx, attachment in
            try tx.execute(sql: "UPDATE checklists SET photo_id = ? WHERE id = 'c1'", arguments: [attachment.id])
        }
        try await device.addChecklist("c2", photo: "p1")
        try await device.queue.startSync()
        try await device.waitForState(saved.id, .synced)
        try await device.waitForState("p1", .synced)
        #expect(remote.files.withLock { $0[saved.filename] } == testBytes(1500))
        #expect(device.bytesOnDisk("p1.jpg") == testBytes(2000, seed: 5))
        await device.close()
    }
}

/// A remote whose first upload notices cancellation only once the test opens a gate, like a network call
/// that takes a while to wind down; later uploads go straight to the in-memory remote.
final class SlowToCancelRemote: RemoteStorageAdapter {
    let inner = InMemoryRemoteStorage()
    private let calls = LockedValue(0)
    private let gate: AsyncStream<Void>
    private let opener: AsyncStream<Void>.Continuation
    private let entered: AsyncStream<Void>
    private let enteredSignal: AsyncStream<Void>.Continuation

    init() {
        (gate, opener) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        (entered, enteredSignal) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    var uploadCalls: Int { calls.withLock { $0 } }

    func uploadFile(data: Data, attachment: AttachmentSync.Attachment) async throws {
        let call = calls.withLock { count in
            count += 1
            return count
        }
        if call == 1 {
            enteredSignal.yield()
            // Not cancellable: waits for the gate whatever happens to the task, then reports cancellation.
            await Task { [gate] in for await _ in gate { return } }.value
            try Task.checkCancellation()
        }
        try await inner.uploadFile(data: data, attachment: attachment)
    }
    func downloadFile(attachment: AttachmentSync.Attachment) async throws -> Data {
        try await inner.downloadFile(attachment: attachment)
    }
    func deleteFile(attachment: AttachmentSync.Attachment) async throws {
        try await inner.deleteFile(attachment: attachment)
    }

    /// Returns once the first upload is in flight.
    func waitForFirstUpload() async {
        for await _ in entered { return }
    }

    func openGate() { opener.yield() }
}

@Suite("Transfer engine: stop and restart", .cleansUp)
struct StopRestartTests {
    @Test("a transfer interrupted by stopSync restarts when sync starts again before it has wound down")
    func restartAfterSlowCancellation() async throws {
        let remote = SlowToCancelRemote()
        // After each pass the loop waits one throttle period on the manual clock, which is never advanced:
        // one pass per sync, and a sleeping loop says that pass is over.
        let device = try QueueHarness(remote: remote) { $0.syncThrottleDuration = .seconds(1) }
        let saved = try await device.queue.saveFile(data: testBytes(300), mediaType: nil, fileExtension: "jpg")
        try await device.queue.startSync()
        await remote.waitForFirstUpload()

        await device.queue.stopSync()
        try await waitUntil("the stopped loop to stop sleeping") { device.clock.sleeperCount == 0 }
        try await device.queue.startSync()
        await device.clock.waitForSleepers(count: 1)
        // The interrupted upload ends only now, after the new sync's only pass: nothing but the end of the
        // interrupted transfer itself can start it again.
        remote.openGate()

        try await device.waitForState(saved.id, .synced, seconds: 10)
        #expect(remote.uploadCalls == 2)
        #expect(await remote.inner.file(named: "\(saved.id).jpg") == testBytes(300))
    }
}
