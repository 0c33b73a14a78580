import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// Watches every checklist's photo, with the checklist's description as the media type.
@Sendable func watchPhotosWithMediaTypes(_ db: LocalDatabase)
    -> @Sendable () throws -> AsyncThrowingStream<[WatchedAttachmentItem], any Error>
{
    {
        try db.watch(sql: "SELECT photo_id, description FROM checklists WHERE photo_id IS NOT NULL") { cursor in
            try WatchedAttachmentItem(
                id: cursor.getString(name: "photo_id"), fileExtension: "bin",
                mediaType: cursor.getStringOptional(name: "description"))
        }
    }
}

/// Every element of a finite sequence.
func collect<Element: Sendable>(_ stream: AsyncStream<Element>) async -> [Element] {
    var elements: [Element] = []
    for await element in stream { elements.append(element) }
    return elements
}

extension QueueHarness {
    func addChecklist(_ id: String, photo: String, mediaType: String) async throws {
        try await db.execute(
            sql: "INSERT INTO checklists (id, description, completed, photo_id) VALUES (?, ?, 0, ?)",
            parameters: [id, mediaType, photo])
    }

    func fileExists(_ name: String) -> Bool {
        FileManager.default.fileExists(atPath: (attachmentsPath as NSString).appendingPathComponent(name))
    }

    func fileSize(_ name: String) -> Int? {
        bytesOnDisk(name)?.count
    }
}

@Suite("On-demand downloads, purge, progress, status, cache budget", .cleansUp)
struct OnDemandTests {
    static let imagesEagerly = DownloadPolicy.custom { item in
        item.mediaType?.hasPrefix("image/") == true ? .eager : .onDemand
    }

    @Test("the policy splits by media type: images are downloaded, videos get a remote-only record")
    func policySplit() async throws {
        let device = try QueueHarness(customWatch: CustomWatch(make: watchPhotosWithMediaTypes)) {
            $0.downloadPolicy = Self.imagesEagerly
        }
        let remote = try device.memoryRemote
        await remote.setFile(testBytes(100, seed: 1), named: "img.bin")
        await remote.setFile(testBytes(5000, seed: 2), named: "vid.bin")
        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: "img", mediaType: "image/jpeg")
        try await device.addChecklist("c2", photo: "vid", mediaType: "video/mp4")
        try await device.waitForState("img", .synced)
        try await device.waitForState("vid", .synced)
        try await device.queue.syncNow()

        let image = try #require(try await device.queue.attachment(id: "img"))
        let video = try #require(try await device.queue.attachment(id: "vid"))
        #expect(image.contentAvailable && !image.isOnDemand)
        #expect(device.bytesOnDisk("img.bin") == testBytes(100, seed: 1))
        #expect(!video.contentAvailable && video.isOnDemand)
        #expect(video.mediaType == "video/mp4")
        #expect(!device.fileExists("vid.bin"))
        #expect(await remote.callLog.filter { $0.operation == .download }.map(\.filename) == ["img.bin"])

        let fetched = try await device.queue.download(attachmentId: "vid")
        #expect(fetched.contentAvailable)
        #expect(fetched.state == .synced)
        #expect(device.bytesOnDisk("vid.bin") == testBytes(5000, seed: 2))
    }

    @Test("10 concurrent download calls share one remote download and all get the attachment")
    func singleFlight() async throws {
        let (device, remote) = try await onDemandDevice(withVideo: testBytes(200_000))

        await remote.hold()
        let queue = device.queue
        let calls = (0..<10).map { _ in Task { try await queue.download(attachmentId: "v") } }
        await remote.waitForInFlight(count: 1)
        await remote.release()
        var results: [AttachmentSync.Attachment] = []
        for call in calls { results.append(try await call.value) }

        #expect(results.allSatisfy { $0.contentAvailable && $0.localUri == results[0].localUri })
        #expect(await remote.downloadCount == 1)
        #expect(await remote.bytesServed == 200_000)
        #expect(device.bytesOnDisk("v.bin") == testBytes(200_000))
        // Content already here: at once, no remote call.
        _ = try await device.queue.download(attachmentId: "v")
        #expect(await remote.downloadCount == 1)
    }

    @Test("a cancelled download leaves no file under the final name; the next one resumes from the offset")
    func cancelAndResume() async throws {
        let content = testBytes(300_000, seed: 7)
        let (device, remote) = try await onDemandDevice(withVideo: content)

        try await interruptDownload(of: device, from: remote, atByte: 100_000)

        #expect(!device.fileExists("v.bin"), "no half file under the final name")
        #expect(device.fileSize(FileName.downloadingName(for: "v.bin")) == 100_000)
        #expect(try await device.queue.attachment(id: "v")?.contentAvailable == false)

        await remote.release()
        let fetched = try await device.queue.download(attachmentId: "v")
        #expect(fetched.contentAvailable)
        #expect(device.bytesOnDisk("v.bin") == content)
        #expect(!device.fileExists(FileName.downloadingName(for: "v.bin")))
        #expect(await remote.downloadCount == 2)
        #expect(await remote.bytesServed == 300_000, "100,000 bytes, then the other 200,000")
    }

    @Test("a cancelled download whose record cannot be read keeps its partial file; the next one resumes")
    func cancelledWithUnreadableRecordKeepsPartial() async throws {
        let content = testBytes(300_000, seed: 8)
        let (device, remote) = try await onDemandDevice(withVideo: content)

        try await interruptDownload(of: device, from: remote, atByte: 100_000) {
            // Every read of the table fails while it is away: whether the partial is still wanted is unknown.
            try await device.db.execute(sql: "ALTER TABLE attachments RENAME TO attachments_away")
        }
        try await device.db.execute(sql: "ALTER TABLE attachments_away RENAME TO attachments")

        #expect(device.fileSize(FileName.downloadingName(for: "v.bin")) == 100_000, "kept, to resume")
        await remote.release()
        let fetched = try await device.queue.download(attachmentId: "v")
        #expect(fetched.contentAvailable)
        #expect(device.bytesOnDisk("v.bin") == content)
        #expect(await remote.bytesServed == 300_000, "100,000 bytes, then the other 200,000")
    }

    @Test("one caller cancelling does not stop a download another caller still waits for")
    func cancelOneOfTwoWaiters() async throws {
        let (device, remote) = try await onDemandDevice(withVideo: testBytes(200_000))

        await remote.holdDownloads(atByte: 64 * 1024)
        let queue = device.queue
        let leaving = Task { try await queue.download(attachmentId: "v") }
        await remote.waitForHeldDownload()
        let staying = Task { try await queue.download(attachmentId: "v") }
        try await waitUntil("the second caller to join") { await queue.downloadWaiters(for: "v") == 2 }
        leaving.cancel()
        await #expect(throws: CancellationError.self) { try await leaving.value }
        await remote.release()
        let attachment = try await staying.value
        #expect(attachment.contentAvailable)
        #expect(device.bytesOnDisk("v.bin") == testBytes(200_000))
        #expect(await remote.downloadCount == 1, "the shared transfer went on")
    }

    @Test("an interrupted download resumes after the app restarts")
    func resumeAfterRestart() async throws {
        let folder = try TemporaryDirectory()
        let remote = InMemoryRemoteStorage()
        let content = testBytes(300_000, seed: 9)
        await remote.setFile(content, named: "v.bin")
        let first = try QueueHarness(
            folder: folder, remote: remote, customWatch: CustomWatch(make: watchPhotosWithMediaTypes)
        ) { $0.downloadPolicy = .onDemand }
        try await first.queue.startSync()
        try await first.addChecklist("c1", photo: "v", mediaType: "video/mp4")
        try await first.waitForState("v", .synced)
        await remote.holdDownloads(atByte: 128 * 1024)
        let queue = first.queue
        let interrupted = Task { try await queue.download(attachmentId: "v") }
        await remote.waitForHeldDownload()
        // The app goes away mid-download.
        await first.close()
        _ = await interrupted.result
        #expect(first.fileSize(FileName.downloadingName(for: "v.bin")) == 128 * 1024)

        await remote.release()
        let second = try QueueHarness(
            folder: folder, remote: remote, customWatch: CustomWatch(make: watchPhotosWithMediaTypes)
        ) { $0.downloadPolicy = .onDemand }
        let fetched = try await second.queue.download(attachmentId: "v")
        #expect(fetched.contentAvailable)
        #expect(second.bytesOnDisk("v.bin") == content)
        #expect(await remote.bytesServed == 300_000, "128 KiB before the restart, the rest after")
    }

    @Test("progress updates are throttled to 1 % steps when the clock does not move")
    func progressThrottled() async throws {
        // 10 MiB in 64 KiB chunks: 160 callbacks from the remote.
        let (device, _) = try await onDemandDevice(withVideo: testBytes(10 * 1024 * 1024)) {
            $0.progressInterval = .seconds(1)
        }

        let stream = device.queue.progress(attachmentId: "v")
        let updates = Task { await collect(stream) }
        _ = try await device.queue.download(attachmentId: "v")
        let seen = try await withDeadline("the progress to end") { await updates.value }
        // The manual clock stands still, so only 1 % steps (at most 100), the start and the end go out.
        #expect(seen.count <= 103)
        #expect(seen.count >= 50, "about every 1.6 % of the file (one 64 KiB chunk)")
        #expect(seen.last?.completedBytes == Int64(10 * 1024 * 1024))
    }

    @Test("purge removes the local content only; a later download brings it back")
    func purgeRoundTrip() async throws {
        let device = try QueueHarness(watch: true)
        let remote = try device.memoryRemote
        await remote.setFile(testBytes(4000, seed: 4), named: "p1.jpg")
        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: "p1")
        try await device.waitForState("p1", .synced)

        let purged = try await device.queue.purge(attachmentId: "p1")
        #expect(!purged.contentAvailable)
        #expect(purged.state == .synced)
        #expect(!device.fileExists("p1.jpg"))
        #expect(await remote.file(named: "p1.jpg") == testBytes(4000, seed: 4), "the remote copy stays")
        #expect(await remote.deleteCount == 0)

        let again = try await device.queue.download(attachmentId: "p1")
        #expect(again.contentAvailable)
        #expect(device.bytesOnDisk("p1.jpg") == testBytes(4000, seed: 4))
        #expect(await remote.downloadCount == 2)
    }

    @Test("purging content not uploaded yet is refused: it is the only copy")
    func purgeRefusesPendingUpload() async throws {
        let device = try QueueHarness()
        let saved = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        let error = await #expect(throws: AttachmentError.self) {
            try await device.queue.purge(attachmentId: saved.id)
        }
        #expect(error?.code == .invalidState)
        #expect(device.bytesOnDisk("\(saved.id).jpg") == testBytes(10))
        await #expect(throws: AttachmentError.self) { try await device.queue.purge(attachmentId: "nope") }
    }

    @Test("progress of a download and of an upload is monotonic and ends with the final state")
    func progressSequences() async throws {
        let (device, remote) = try await onDemandDevice(withVideo: testBytes(1_000_000)) {
            $0.progressInterval = .zero
        }

        // Subscribed before the download starts: the stream waits for it.
        let stream = device.queue.progress(attachmentId: "v")
        let updates = Task { await collect(stream) }
        _ = try await device.queue.download(attachmentId: "v")
        let downloads = try await withDeadline("the download's progress to end") { await updates.value }
        #expect(downloads.count >= 3)
        #expect(zip(downloads, downloads.dropFirst()).allSatisfy { $0.completedBytes <= $1.completedBytes })
        #expect(downloads.allSatisfy { $0.direction == .download })
        let last = try #require(downloads.last)
        #expect(last.status.description == "finished")
        #expect(last.completedBytes == 1_000_000)
        #expect(downloads.dropLast().allSatisfy { !$0.status.isFinal })

        // An upload, and a failed one.
        await remote.failNext(.upload, with: InMemoryRemoteStorage.offlineError)
        await device.queue.stopSync()
        let saved = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        let uploadStream = device.queue.progress(attachmentId: saved.id)
        let uploadUpdates = Task { await collect(uploadStream) }
        try await device.queue.syncNow()
        let uploads = try await withDeadline("the upload's progress to end") { await uploadUpdates.value }
        #expect(uploads.last?.direction == .upload)
        #expect(uploads.last?.status.description == "failed(remoteUnavailable)")

        // Nothing left to transfer: one final update, then the end.
        let done = try await withDeadline("an idle attachment's progress") {
            await collect(device.queue.progress(attachmentId: "v"))
        }
        #expect(done.map(\.status.description) == ["finished"])
    }

    @Test("status counts and bytes match the table; failures wait for retry with their error")
    func statusMatchesTable() async throws {
        let device = try QueueHarness(watch: true) { $0.retryBackoff = RetryBackoff(jitter: false) }
        let remote = try device.memoryRemote
        await remote.setFile(testBytes(300), named: "p1.jpg")
        await remote.setFile(testBytes(500), named: "p2.jpg")
        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: "p1")
        try await device.addChecklist("c2", photo: "p2")
        try await device.addChecklist("c3", photo: "missing")
        try await device.waitForState("p1", .synced)
        try await device.waitForState("p2", .synced)

        let snapshot = try await withDeadline("a status with the failed download") {
            await device.queue.status.first { $0.waitingForRetry.count == 1 && $0.count(.synced) == 2 }
        }
        let status = try #require(snapshot)
        let rows = try await device.db.getAll(
            sql: "SELECT state, count(*) AS n, CAST(total(size) AS INTEGER) AS bytes FROM attachments GROUP BY state"
        ) { (try $0.getInt(name: "state"), try $0.getInt(name: "n"), try $0.getInt64Optional(name: "bytes") ?? 0) }
        for (state, count, bytes) in rows {
            let key = try #require(AttachmentState(rawValue: state))
            let totals = try #require(status.states[key])
            #expect(totals.count == count)
            #expect(totals.bytes == bytes)
        }
        #expect(status.states.values.map(\.count).reduce(0, +) == 3)
        #expect(status.localContentBytes == 800)
        let retry = try #require(status.waitingForRetry.first)
        #expect(retry.attachmentId == "missing")
        #expect(retry.state == .queuedDownload)
        // A remote file not found is waited for (the uploading device has not finished), not a failed attempt.
        #expect(retry.attempts == 0)
        #expect(retry.awaitingUpload >= 1)
        #expect(status.awaitingUpload.map(\.attachmentId) == ["missing"])
        #expect(retry.lastError?.contains("remoteNotFound") == true)
        #expect(retry.nextAttemptAt > device.clock.date)
        #expect(status.bytesTransferred >= 800)
    }

    @Test("over the byte budget, archived content goes first, then the least recently used on-demand; pinned stays")
    func cacheBudget() async throws {
        let device = try QueueHarness(customWatch: CustomWatch(make: watchPhotosWithMediaTypes)) {
            $0.downloadPolicy = .custom { $0.id == "e" ? .eager : .onDemand }
            $0.maxCacheBytes = 250
        }
        let remote = try device.memoryRemote
        for id in ["a", "b", "c", "d", "e"] { await remote.setFile(testBytes(100), named: "\(id).bin") }
        let events = device.queue.events
        try await device.queue.startSync()
        for id in ["a", "b", "c", "d", "e"] { try await device.addChecklist("c-\(id)", photo: id, mediaType: "x/y") }
        try await device.waitForState("e", .synced)
        // e is cached but no longer referred to: archived, content kept.
        try await device.db.execute(sql: "DELETE FROM checklists WHERE id = 'c-e'")
        try await device.waitForState("e", .archived)
        await device.queue.stopSync()

        try await device.queue.pin(attachmentId: "b")
        for id in ["a", "b", "c", "d"] {
            await device.clock.advance(by: .seconds(1))
            _ = try await device.queue.download(attachmentId: id)
        }
        // e, archived, is the most recently used: archived content still goes first.
        await device.clock.advance(by: .seconds(1))
        _ = try await device.queue.download(attachmentId: "e")
        // 500 bytes on disk, 250 allowed: e (archived), then a and c (least recently used); b is pinned.
        try await device.queue.syncNow()

        #expect(try await device.state(of: "e") == nil, "the archived record goes with its content")
        for (id, kept) in [("a", false), ("b", true), ("c", false), ("d", true)] {
            let attachment = try #require(try await device.queue.attachment(id: id))
            #expect(attachment.contentAvailable == kept, "\(id)")
            #expect(attachment.state == .synced, "\(id) stays, remote-only when evicted")
            #expect(device.fileExists("\(id).bin") == kept, "\(id)")
        }
        var evicted: [String] = []
        for await event in events {
            if case .evicted(let id, let bytes) = event {
                #expect(bytes == 100)
                evicted.append(id)
            }
            if evicted.count == 3 { break }
        }
        #expect(evicted == ["e", "a", "c"])
    }

    @Test("events report uploads and give-ups with typed errors")
    func eventsReportOutcomes() async throws {
        let device = try QueueHarness { $0.maxAttempts = 1 }
        let remote = try device.memoryRemote
        let events = device.queue.events
        let good = try await device.queue.saveFile(data: testBytes(64), mediaType: nil, fileExtension: "jpg")
        try await device.queue.syncNow()
        // A server that answers (not the network's failure, which would spend no attempt and give nothing up).
        await remote.setAlwaysFailing(
            .upload,
            with: AttachmentError(code: .remoteUnavailable, message: "HTTP 503 (maintenance)", retryAfter: .seconds(1)))
        let bad = try await device.queue.saveFile(data: testBytes(8), mediaType: nil, fileExtension: "jpg")
        try await device.queue.syncNow()

        var seen: [String] = []
        for await event in events {
            switch event {
            case .uploaded(let id, let bytes):
                #expect(id == good.id && bytes == 64)
                seen.append("uploaded")
            case .gaveUp(let id, let error, let attempts):
                #expect(id == bad.id && attempts == 1)
                #expect(error.code == .remoteUnavailable)
                seen.append("gaveUp")
            default:
                break
            }
            if seen.count == 2 { break }
        }
        #expect(seen == ["uploaded", "gaveUp"])
        #expect(try await device.state(of: bad.id) == .archived)
    }

    /// A device whose queue fetches everything on demand, with sync started and the record of video `v`
    /// (`v.bin` on the in-memory remote, holding `bytes`) already made, remote-only.
    /// Starts a download of `v` that the remote holds at `byte`, runs `beforeCancel`, cancels the call, and
    /// returns once the transfer and the remote call have ended (the remote keeps holding later downloads).
    private func interruptDownload(
        of device: QueueHarness, from remote: InMemoryRemoteStorage, atByte byte: Int64,
        beforeCancel: () async throws -> Void = {}
    ) async throws {
        await remote.holdDownloads(atByte: byte)
        let queue = device.queue
        let call = Task { try await queue.download(attachmentId: "v") }
        await remote.waitForHeldDownload()
        try await beforeCancel()
        call.cancel()
        await #expect(throws: CancellationError.self) { try await call.value }
        _ = try await withDeadline("the interrupted transfer to wind down") {
            await queue.status.first { $0.transfers.isEmpty }
        }
        try await waitFor("the remote call to end") { await remote.waitUntilNoCallInFlight() }
    }

    private func onDemandDevice(
        withVideo bytes: Data, configure: (inout AttachmentQueue.Configuration) -> Void = { _ in }
    ) async throws -> (QueueHarness, InMemoryRemoteStorage) {
        let device = try QueueHarness(customWatch: CustomWatch(make: watchPhotosWithMediaTypes)) {
            $0.downloadPolicy = .onDemand
            configure(&$0)
        }
        let remote = try device.memoryRemote
        await remote.setFile(bytes, named: "v.bin")
        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: "v", mediaType: "video/mp4")
        try await device.waitForState("v", .synced)
        return (device, remote)
    }

}
