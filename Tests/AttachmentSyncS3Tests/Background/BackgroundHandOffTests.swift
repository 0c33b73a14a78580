import AttachmentSync
import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// The queue handing its transfers to a background service (the spooled one in a process of its own, the Linux
/// stand-in for a background `URLSession`, or URLSessionTransferService itself) and adopting the results, on
/// Ceph; requests counted by the gateway's own usage log.
@Suite("Background hand-off: the queue over Ceph with a background service")
struct BackgroundHandOffTests {
    /// The services a queue hands transfers to in these tests.
    enum ServiceKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// The spooled service, in a process of its own.
        case spool
        /// `URLSessionTransferService` (in this process on Linux).
        case urlSession

        var testDescription: String { rawValue }
    }

    /// A service of `kind` in `folder` (for the spool, with its process), stopped when `body` ends.
    static func withService<T>(
        _ kind: ServiceKind = .spool, _ folder: URL, _ body: (any BackgroundTransferService) async throws -> T
    ) async throws -> T {
        switch kind {
        case .spool:
            let service = try SpoolTransferService(folder: folder)
            let process = try SpoolTransferServiceTests.startService(folder)
            defer { process.kill() }
            return try await body(service)
        case .urlSession:
            let service = try URLSessionTransferService(
                configuration: .init(identifier: "attachment-sync.tests.\(UUID())", folder: folder))
            defer { service.invalidateAndCancel() }
            return try await body(service)
        }
    }

    static func recording(_ operations: LockedValue<[String]>) -> (inout S3RemoteStorage.Configuration) -> Void {
        { configuration in
            configuration.requestObserver = { event in operations.withLock { $0.append(event.operation) } }
        }
    }

    /// Waits (bounded) until the service holds no result: every one was acknowledged.
    static func waitUntilAcknowledged(_ service: any BackgroundTransferService) async throws {
        try await withDeadline("every result acknowledged") {
            for _ in 0..<1_000 {
                if try await service.results().isEmpty { return }
                try await Task.sleep(for: .milliseconds(20))
            }
            throw AttachmentError(code: .timedOut, message: "results left: \(try await service.results().map(\.id))")
        }
    }

    @Test(
        "saved files go to the service and are adopted: each stored once (the gateway counts one PUT each), none sent by the queue's adapter; another device's downloads go too and land byte-exact",
        arguments: ServiceKind.allCases
    )
    func uploadsAndDownloadsAreAdopted(kind: ServiceKind) async throws {
        let operationsA = LockedValue<[String]>([])
        try await S3TestBucket.with("handoff", configure: Self.recording(operationsA)) { storageA, bucket in
            try await withTemporaryDirectory { directory in
                let sizes = [0, 1, 1_000, 100_000, 1_000_000, 3_000_000]
                var saved: [(id: String, content: Data)] = []
                try await Self.withService(kind, directory.appendingPathComponent("spool-a")) { service in
                    try await S3QueueDevice.with(
                        folder: directory.appendingPathComponent("a"), storage: storageA,
                        configure: { $0.backgroundTransfers = BackgroundTransfers(service: service) }
                    ) { a in
                        let events = a.queue.events
                        try await a.queue.startSync()
                        for (index, size) in sizes.enumerated() {
                            let content = testBytes(count: size, seed: UInt32(300 + index))
                            let photo = try await a.savePhoto(content, checklist: "item-\(index)")
                            saved.append((photo.id, content))
                        }
                        for file in saved { try await a.waitForState(file.id, .synced) }
                        let expected = Set(saved.map(\.id))
                        let handedOff = try await withDeadline("six hand-off events") {
                            var ids: Set<String> = []
                            for await event in events {
                                if case .handedOff(let id) = event { ids.insert(id) }
                                if ids.count == expected.count { break }
                            }
                            return ids
                        }
                        #expect(handedOff == expected)
                        // Acknowledged right after the commit that made the record synced.
                        try await Self.waitUntilAcknowledged(service)
                        let left = try await a.db.getAll(
                            sql: "SELECT id FROM attachment_sync_handoffs", parameters: []
                        ) { try $0.getString(name: "id") }
                        #expect(left.isEmpty, "every hand-off record removed")
                    }
                }
                #expect(!operationsA.withLock { $0 }.contains("PutObject"), "no upload ran through the queue's adapter")
                let afterUploads = try await CephUsage.settled(bucket: bucket.name)
                #expect(afterUploads["put_obj"].all == sizes.count, "one PUT per file: \(afterUploads)")
                #expect(afterUploads["put_obj"].successful == sizes.count, "\(afterUploads)")

                let operationsB = LockedValue<[String]>([])
                try await bucket.withStorage(Self.recording(operationsB)) { storageB in
                    try await Self.withService(kind, directory.appendingPathComponent("spool-b")) { service in
                        try await S3QueueDevice.with(
                            folder: directory.appendingPathComponent("b"), storage: storageB,
                            configure: { $0.backgroundTransfers = BackgroundTransfers(service: service) }
                        ) { b in
                            for (index, file) in saved.enumerated() {
                                try await b.addChecklist("item-\(index)", photo: file.id)
                            }
                            try await b.queue.startSync()
                            for file in saved {
                                try await b.waitForState(file.id, .synced)
                                #expect(b.bytesOnDisk("\(file.id).jpg") == file.content, "\(file.content.count) bytes")
                            }
                            try await Self.waitUntilAcknowledged(service)
                        }
                    }
                }
                #expect(
                    !operationsB.withLock { $0 }.contains("GetObject"), "no download ran through the queue's adapter")
                let afterDownloads = try await CephUsage.settled(bucket: bucket.name)
                #expect(afterDownloads["put_obj"].all == sizes.count, "still one PUT per file: \(afterDownloads)")
            }
        }
    }

    @Test(
        "the status shows handed-off uploads (queued, handed off) until the service runs them, a relaunched app adopts their results, and nothing is sent twice"
    )
    func statusAndRelaunch() async throws {
        try await S3TestBucket.with("handoff-status") { storage, bucket in
            try await withTemporaryDirectory { directory in
                let spool = directory.appendingPathComponent("spool")
                let service = try SpoolTransferService(folder: spool)
                let folder = directory.appendingPathComponent("app")
                var saved: [(id: String, content: Data)] = []
                // The service process is not running yet: the system has the transfers, and has not run them.
                try await S3QueueDevice.with(
                    folder: folder, storage: storage,
                    configure: { $0.backgroundTransfers = BackgroundTransfers(service: service) }
                ) { app in
                    try await app.queue.startSync()
                    for index in 0..<3 {
                        let content = testBytes(count: 20_000 + index, seed: UInt32(400 + index))
                        let photo = try await app.queue.saveFile(
                            data: content, mediaType: "image/jpeg", fileExtension: "jpg")
                        saved.append((photo.id, content))
                    }
                    let status = try await withDeadline("three uploads handed off") {
                        for await status in app.queue.status where status.handedOff[.queuedUpload]?.count == 3 {
                            return status
                        }
                        throw AttachmentError(code: .timedOut, message: "the status stream ended")
                    }
                    #expect(status.count(.queuedUpload) == 3, "still queued until adopted")
                    #expect(status.handedOff[.queuedUpload]?.bytes == Int64(saved.map(\.content.count).reduce(0, +)))
                    #expect(try await service.running().count == 3)
                }
                // The app is gone; the service runs the transfers; the app comes back and adopts the results.
                let process = try SpoolTransferServiceTests.startService(spool)
                defer { process.kill() }
                _ = try await SpoolTransferServiceTests.waitForResults(service, try await service.running())
                try await S3QueueDevice.with(
                    folder: folder, storage: storage,
                    configure: { $0.backgroundTransfers = BackgroundTransfers(service: service) }
                ) { app in
                    try await app.queue.startSync()
                    for file in saved { try await app.waitForState(file.id, .synced) }
                    try await Self.waitUntilAcknowledged(service)
                    let status = try await withDeadline("nothing handed off") {
                        for await status in app.queue.status where status.handedOff.isEmpty { return status }
                        throw AttachmentError(code: .timedOut, message: "the status stream ended")
                    }
                    #expect(status.count(.synced) == 3)
                }
                for file in saved {
                    let stored = try await storage.downloadFile(
                        attachment: BackgroundRequestTests.attachment(file.id + ".jpg", file.content))
                    #expect(stored == file.content)
                }
                let usage = try await CephUsage.settled(bucket: bucket.name)
                #expect(usage["put_obj"].all == 3, "\(usage)")
            }
        }
    }

    @Test(
        "a lost report and a lost transfer: the upload the service stored is confirmed from the remote (no second PUT), the download it forgot is handed over again"
    )
    func lostReportAndLostTransfer() async throws {
        try await S3TestBucket.with("handoff-lost") { storage, bucket in
            try await withTemporaryDirectory { directory in
                let spool = directory.appendingPathComponent("spool")
                let service = try SpoolTransferService(folder: spool)
                let folder = directory.appendingPathComponent("app")
                // Another device's photo, for the download.
                let remoteContent = testBytes(count: 30_000, seed: 501)
                try await storage.uploadFile(
                    data: remoteContent, attachment: BackgroundRequestTests.attachment("other.jpg", remoteContent))
                let configure: (inout AttachmentQueue.Configuration) -> Void = { configuration in
                    var transfers = BackgroundTransfers(service: service)
                    transfers.recoveryDelay = .milliseconds(500)
                    configuration.backgroundTransfers = transfers
                }
                let content = testBytes(count: 40_000, seed: 502)
                var uploadId = ""
                // The app hands both over and goes; the service does not run yet.
                try await S3QueueDevice.with(folder: folder, storage: storage, configure: configure) { app in
                    try await app.queue.startSync()
                    uploadId = try await app.queue.saveFile(
                        data: content, mediaType: "image/jpeg", fileExtension: "jpg"
                    ).id
                    try await app.addChecklist("row-1", photo: "other")
                    try await withDeadline("two transfers handed over") {
                        for _ in 0..<1_000 {
                            if try await service.running().count == 2 { return }
                            try await Task.sleep(for: .milliseconds(20))
                        }
                        throw AttachmentError(code: .timedOut, message: "not handed over")
                    }
                }
                let pending = try await service.running()
                let transfers = try pending.map { id in
                    try #require(try service.spool.read(BackgroundTransfer.self, from: service.spool.pendingURL(id)))
                }
                let upload = try #require(transfers.first { $0.direction == .upload })
                let download = try #require(transfers.first { $0.direction == .download })
                // The service loses the download, runs the upload, and its report of the upload is lost.
                try service.spool.remove(service.spool.pendingURL(download.id))
                let process = try SpoolTransferServiceTests.startService(spool)
                defer { process.kill() }
                _ = try await SpoolTransferServiceTests.waitForResults(service, [upload.id])
                try service.spool.remove(service.spool.resultURL(upload.id))

                try await S3QueueDevice.with(folder: folder, storage: storage, configure: configure) { app in
                    try await app.queue.startSync()
                    try await app.waitForState(uploadId, .synced)
                    try await app.waitForState("other", .synced)
                    #expect(app.bytesOnDisk("other.jpg") == remoteContent)
                    try await Self.waitUntilAcknowledged(service)
                }
                let usage = try await CephUsage.settled(bucket: bucket.name)
                // The other device's photo and the app's upload, once each.
                #expect(usage["put_obj"].all == 2, "\(usage)")
                let stored = try await storage.downloadFile(
                    attachment: BackgroundRequestTests.attachment(uploadId + ".jpg", content))
                #expect(stored == content)
            }
        }
    }
}
