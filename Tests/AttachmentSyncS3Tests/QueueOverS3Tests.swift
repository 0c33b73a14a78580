import AttachmentSync
import Foundation
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// The real `AttachmentQueue` over `S3RemoteStorage` on the local Ceph S3 gateway (`scripts/s3-server start`):
/// real SQLite files, real attachment folders, a real bucket per test.
@Suite("AttachmentQueue over S3 on Ceph")
struct QueueOverS3Tests {
    static let mebibyte = 1024 * 1024
    static let fiveMiB: Int64 = 5 * 1024 * 1024

    /// Adapter settings that make a 12 MiB file a multipart upload of three parts, and record every request.
    static func multipart(recording requests: LockedValue<[String]>) -> (inout S3RemoteStorage.Configuration) -> Void {
        { configuration in
            configuration.multipartThreshold = fiveMiB
            configuration.partSize = fiveMiB
            configuration.requestObserver = { event in requests.withLock { $0.append(event.operation) } }
        }
    }

    // MARK: - Two devices

    @Test("two devices, one bucket: ten files (one of 12 MiB, multipart) reach B intact; a delete removes the object")
    func twoDevicesShareABucket() async throws {
        let requests = LockedValue<[String]>([])
        try await S3TestBucket.with("queue-two", configure: Self.multipart(recording: requests)) { storageA, bucket in
            try await bucket.withStorage(Self.multipart(recording: LockedValue([]))) { storageB in
                try await withTemporaryDirectory { directory in
                    let folderA = directory.appendingPathComponent("a")
                    let folderB = directory.appendingPathComponent("b")
                    try await S3QueueDevice.with(folder: folderA, storage: storageA) { a in
                        try await S3QueueDevice.with(folder: folderB, storage: storageB) { b in
                            try await Self.shareTenFiles(a, b, storageA: storageA, requestsOfA: requests)
                        }
                    }
                }
            }
        }
    }

    /// Given two devices, each with its own database, folder and adapter, sharing one bucket.
    private static func shareTenFiles(
        _ a: S3QueueDevice, _ b: S3QueueDevice, storageA: S3RemoteStorage, requestsOfA requests: LockedValue<[String]>
    ) async throws {
        try await a.queue.startSync()
        try await b.queue.startSync()

        // When A saves ten files, each referred to by a checklist row, the first one of 12 MiB
        let sizes = [12 * mebibyte, 0, 1, 1024, 64 * 1024, 100_000, 5 * mebibyte, 3, 700, 2048]
        var saved: [(id: String, checklist: String, content: Data)] = []
        for (index, size) in sizes.enumerated() {
            let content = testBytes(count: size, seed: UInt32(index + 1))
            let checklist = "item-\(index)"
            let attachment = try await a.savePhoto(content, checklist: checklist)
            saved.append((attachment.id, checklist, content))
        }
        for file in saved { try await a.waitForState(file.id, .synced) }

        // Then every file is in the bucket, the big one uploaded in parts
        let uploads = requests.withLock { $0 }
        #expect(uploads.filter { $0 == "CompleteMultipartUpload" }.count == 1)
        #expect(uploads.filter { $0 == "UploadPart" }.count == 3, "12 MiB in 5 MiB parts")
        #expect(uploads.filter { $0 == "PutObject" }.count == sizes.count - 1)
        #expect(Set(try await storageA.listKeys()) == Set(saved.map { "\($0.id).jpg" }))

        // When B receives the rows, as row sync would bring them
        for file in saved { try await b.addChecklist(file.checklist, photo: file.id) }

        // Then B's queue downloads every file, byte for byte
        for file in saved {
            try await b.waitForState(file.id, .synced)
            let record = try #require(try await b.queue.attachment(id: file.id))
            #expect(record.contentAvailable)
            #expect(record.size == Int64(file.content.count))
            #expect(b.bytesOnDisk("\(file.id).jpg") == file.content, "\(file.content.count) bytes")
        }

        // When A deletes one of them, clearing its row in the same transaction
        let deleted = saved[3]
        try await a.queue.deleteFile(attachmentId: deleted.id) { tx, _ in
            _ = try tx.execute(sql: "UPDATE checklists SET photo_id = NULL WHERE photo_id = ?", arguments: [deleted.id])
        }
        try await a.waitForState(deleted.id, nil)

        // Then its object is gone from the bucket, and only its object
        let keys = try await storageA.listKeys()
        #expect(!keys.contains("\(deleted.id).jpg"))
        #expect(keys.count == saved.count - 1)
        let error = await #expect(throws: AttachmentError.self) {
            _ = try await storageA.downloadFile(
                attachment: AttachmentSync.Attachment(id: deleted.id, filename: "\(deleted.id).jpg", state: .synced))
        }
        #expect(error?.code == .remoteNotFound)
        #expect(a.bytesOnDisk("\(deleted.id).jpg") == nil)
    }

    // MARK: - On-demand resume

    @Test("an on-demand download cancelled partway resumes from its bytes with a ranged GET")
    func onDemandDownloadResumesAfterCancellation() async throws {
        let requests = LockedValue<[String]>([])
        let configure: (inout S3RemoteStorage.Configuration) -> Void = { configuration in
            configuration.requestObserver = { event in requests.withLock { $0.append(event.operation) } }
            // One streamed GET, so the bytes received are the partial file's (split downloads and their resume
            // are S3RemoteStorageTests.largeDownloadsAreSplit).
            configuration.parallelDownloadThreshold = nil
        }
        try await S3TestBucket.with("queue-resume", configure: configure) { storage, _ in
            try await withTemporaryDirectory { directory in
                // Given a 64 MiB object in the bucket
                let content = testBytes(count: 64 * Self.mebibyte, seed: 64)
                let source = directory.appendingPathComponent("source.bin")
                try content.write(to: source)
                let id = "video-\(UUID().uuidString.prefix(8).lowercased())"
                try await storage.uploadFile(
                    fileURL: source,
                    attachment: AttachmentSync.Attachment(id: id, filename: "\(id).jpg", state: .queuedUpload),
                    progress: { _ in })
                // And a device that fetches on demand
                try await S3QueueDevice.with(
                    folder: directory.appendingPathComponent("device"), storage: storage,
                    configure: { $0.downloadPolicy = .onDemand }
                ) { device in
                    try await Self.cancelAndResume(id: id, content: content, on: device, requests: requests)
                }
            }
        }
    }

    private static func cancelAndResume(
        id: String, content: Data, on device: S3QueueDevice, requests: LockedValue<[String]>
    ) async throws {
        // Given a row that refers to the object, so the device has a remote-only record of it
        let queue = device.queue
        try await queue.startSync()
        try await device.addChecklist("c1", photo: id)
        try await device.waitForState(id, .synced)
        #expect(try await queue.attachment(id: id)?.contentAvailable == false)
        requests.withLock { $0 = [] }

        // When a download starts and its caller cancels it once bytes have arrived
        let firstUpdates = queue.progress(attachmentId: id)
        let interrupted = Task { try await queue.download(attachmentId: id) }
        let moving = try await firstElement("bytes of the first transfer", in: firstUpdates) { $0.completedBytes > 0 }
        interrupted.cancel()
        let outcome = await interrupted.result
        if case .success = outcome {
            Issue.record("the download finished before it could be cancelled, so resuming cannot be tested")
            return
        }
        #expect(throws: CancellationError.self) { try outcome.get() }
        _ = try await withDeadline("the interrupted transfer to wind down") {
            await queue.status.first { $0.transfers.isEmpty }
        }

        // Then no file is under the final name, and a partial file holds the bytes received
        let folder = queue.attachmentsDirectory
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        #expect(!names.contains("\(id).jpg"))
        let partials = names.filter { $0.hasPrefix(".attachment-sync-download-") && $0.hasSuffix("\(id).jpg") }
        #expect(partials.count == 1, "\(names)")
        // Beside it, what identifies the object those bytes came from (its ETag), for the resume to check.
        #expect(names.contains(".attachment-sync-etag-\(try #require(partials.first))"), "\(names)")
        let partialPath = folder.appendingPathComponent(try #require(partials.first)).path
        let attributes = try FileManager.default.attributesOfItem(atPath: partialPath)
        let partialSize = try #require(attributes[.size] as? NSNumber).int64Value
        #expect(partialSize >= moving.completedBytes)
        #expect(partialSize > 0 && partialSize < Int64(content.count))
        #expect(try await queue.attachment(id: id)?.contentAvailable == false)

        // When the attachment is downloaded again
        let secondUpdates = queue.progress(attachmentId: id)
        let fetched = try await withDeadline("the second download") { try await queue.download(attachmentId: id) }
        let seen = try await withDeadline("the second transfer's progress to end") {
            var seen: [AttachmentProgress] = []
            for await update in secondUpdates { seen.append(update) }
            return seen
        }

        // Then it started from the partial file's bytes with a second GET, and the content is intact
        #expect(seen.first?.completedBytes == partialSize, "the second transfer starts where the first stopped")
        #expect(seen.first.map { $0.completedBytes > 0 } == true)
        #expect(seen.last?.status.description == "finished")
        #expect(seen.last?.completedBytes == Int64(content.count))
        #expect(requests.withLock { $0 } == ["GetObject", "GetObject"], "one GET, then one ranged GET")
        #expect(fetched.contentAvailable)
        #expect(device.bytesOnDisk("\(id).jpg") == content)
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path) == ["\(id).jpg"])
    }

    // MARK: - Wrong credentials

    @Test("another device's upload is checked against the SHA-256 stored with it: damaged bytes are never synced")
    func damagedObjectIsNeverSynced() async throws {
        try await S3TestBucket.with("queue-damaged") { storageA, bucket in
            try await bucket.withStorage { storageB in
                try await withTemporaryDirectory { directory in
                    try await S3QueueDevice.with(folder: directory.appendingPathComponent("a"), storage: storageA) {
                        a in
                        try await S3QueueDevice.with(
                            folder: directory.appendingPathComponent("b"), storage: storageB
                        ) { b in
                            try await Self.damageAndRepair(a, b, storageA: storageA)
                        }
                    }
                }
            }
        }
    }

    private static func damageAndRepair(_ a: S3QueueDevice, _ b: S3QueueDevice, storageA: S3RemoteStorage)
        async throws
    {
        // Given a photo A saved and uploaded (its SHA-256 stored with the object)
        let content = testBytes(count: 50_000, seed: 11)
        let photo = try await a.queue.saveFile(data: content, mediaType: "image/jpeg", fileExtension: "jpg") {
            tx, attachment in
            _ = try tx.execute(
                sql: "INSERT INTO checklists (id, photo_id) VALUES ('c1', ?)", arguments: [attachment.id])
        }
        try await a.queue.startSync()
        try await a.waitForState(photo.id, .synced)

        // When the object's bytes are damaged on the server (same size, metadata kept), and B, whose row
        // carries no hash, downloads it
        var damaged = content
        damaged[25_000] ^= 0xFF
        let overwrite = S3Request(
            method: .put, key: photo.filename, headers: [(S3RemoteStorage.sha256MetadataHeader, hexSHA256(content))],
            body: .data(damaged), payload: .hashing(damaged), operation: "PutObject")
        _ = try await storageA.send(overwrite, attachmentId: nil)
        let events = b.queue.events
        try await b.addChecklist("c1", photo: photo.id)
        try await b.queue.startSync()

        // Then B refuses it: an integrity failure, the record still waiting for its content, no file in place
        let failure = try await firstElement("B's failed download", in: events) {
            if case .failed(photo.id, let error, _, _) = $0 { return error.code == .integrityMismatch }
            return false
        }
        guard case .failed = failure else { return }
        #expect(try await b.queue.attachment(id: photo.id)?.state == .queuedDownload)
        #expect(b.bytesOnDisk(photo.filename) == nil)

        // When the right bytes are back on the server, B's retry takes them
        _ = try await storageA.send(
            S3Request(
                method: .put, key: photo.filename,
                headers: [(S3RemoteStorage.sha256MetadataHeader, hexSHA256(content))], body: .data(content),
                payload: .hashing(content), operation: "PutObject"), attachmentId: nil)
        try await b.waitForState(photo.id, .synced)
        #expect(b.bytesOnDisk(photo.filename) == content)
    }

    @Test("wrong credentials: the queue records the failure without the secret and reports accessDenied")
    func wrongCredentialsAreRecordedAndReported() async throws {
        try await S3TestBucket.with("queue-denied") { _, bucket in
            // Given a device whose adapter has a wrong secret, and a long backoff so it tries once
            let secret = "wrong-secret-\(UUID().uuidString)"
            let wrongSecret: (inout S3RemoteStorage.Configuration) -> Void = {
                $0.credentials = .static(accessKeyId: bucket.server.accessKey, secretAccessKey: secret)
            }
            try await bucket.withStorage(wrongSecret) { storage in
                try await withTemporaryDirectory { directory in
                    try await S3QueueDevice.with(
                        folder: directory.appendingPathComponent("device"), storage: storage,
                        configure: {
                            $0.retryBackoff = RetryBackoff(
                                initialDelay: .seconds(300), maximumDelay: .seconds(300), jitter: false)
                        }
                    ) { device in
                        try await Self.failToUpload(on: device, secrets: [secret, bucket.server.secretKey])
                    }
                }
            }
        }
    }

    private static func failToUpload(on device: S3QueueDevice, secrets: [String]) async throws {
        let events = device.queue.events

        // When it saves a photo and starts syncing
        let saved = try await device.queue.saveFile(
            data: testBytes(count: 1000), mediaType: "image/jpeg", fileExtension: "jpg"
        ) { tx, attachment in
            _ = try tx.execute(
                sql: "INSERT INTO checklists (id, photo_id) VALUES ('c1', ?)", arguments: [attachment.id])
        }
        try await device.queue.startSync()

        // Then events delivers the failure as accessDenied, with a retry planned
        let event = try await firstElement("a failed event", in: events) {
            if case .failed = $0 { return true }
            return false
        }
        guard case .failed(let id, let error, let attempt, let retryAt) = event else {
            Issue.record("expected a failed event, got \(event)")
            return
        }
        #expect(id == saved.id)
        #expect(error.code == .accessDenied)
        #expect(attempt == 1)
        #expect(retryAt != nil)

        // And the record keeps the upload queued, counting the attempt and saying why
        let row = try await device.db.getOptional(
            sql: "SELECT state, attempts, last_error FROM attachments WHERE id = ?", parameters: [saved.id]
        ) { cursor in
            (
                state: try cursor.getInt(name: "state"), attempts: try cursor.getInt(name: "attempts"),
                lastError: try cursor.getStringOptional(name: "last_error")
            )
        }
        let record = try #require(row)
        #expect(record.state == AttachmentState.queuedUpload.rawValue)
        #expect(record.attempts >= 1)
        let lastError = try #require(record.lastError)
        #expect(lastError.contains("accessDenied"), "\(lastError)")
        #expect(lastError.contains("403"), "\(lastError)")

        // And no text the failure produced holds a secret
        let texts = [
            lastError, String(describing: error), String(reflecting: error), error.localizedDescription,
            String(describing: event),
        ]
        for text in texts {
            for secret in secrets { #expect(!text.contains(secret)) }
        }
    }
}

/// The row reaches a device before the file reaches the bucket, on the real Ceph gateway.
@Suite("Not uploaded yet, on Ceph")
struct NotUploadedYetOnS3Tests {
    @Test("a row whose object is not in the bucket yet waits, spends no attempt, and downloads once it lands")
    func waitsForTheObject() async throws {
        try await S3TestBucket.with("notyet") { storage, _ in
            try await withTemporaryDirectory { folder in
                let configure: (inout AttachmentQueue.Configuration) -> Void = {
                    $0.maxAttempts = 1
                    $0.notUploadedYetBackoff = RetryBackoff(initialDelay: .seconds(600), maximumDelay: .seconds(600))
                }
                try await S3QueueDevice.with(folder: folder, storage: storage, configure: configure) { device in
                    try await device.queue.startSync()
                    try await device.addChecklist("c1", photo: "later")
                    let waiting = try await withDeadline("the download to wait for the upload") {
                        await device.queue.status.first { !$0.awaitingUpload.isEmpty }
                    }
                    #expect(waiting?.awaitingUpload.map(\.attachmentId) == ["later"])
                    #expect(waiting?.awaitingUpload.first?.attempts == 0)
                    try await device.queue.syncNow()
                    let photo = testBytes(count: 70_000, seed: 9)
                    // The other device's upload, through its own adapter.
                    try await storage.uploadFile(data: photo, attachment: attachment("later.jpg"))
                    try await device.queue.syncNow()
                    try await device.waitForState("later", .synced)
                    #expect(device.bytesOnDisk("later.jpg") == photo)
                }
            }
        }
    }
}
