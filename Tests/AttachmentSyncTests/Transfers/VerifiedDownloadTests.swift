import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// A watch that emits one fixed list of items.
func fixedWatch(_ items: [WatchedAttachmentItem]) -> CustomWatch {
    CustomWatch { _ in
        {
            AsyncThrowingStream { continuation in continuation.yield(items) }
        }
    }
}

/// A remote that serves only the first half of each file and says it served it all: a broken server or
/// proxy that truncates bodies without an error.
struct TruncatingRemote: RemoteStorageAdapter {
    let base: InMemoryRemoteStorage
    /// Whether to report the object's true size (a `Content-Length`), or nothing.
    let reportsSize: Bool
    /// Content the adapter claims to have written (a buggy adapter's digest), or `nil` to claim nothing.
    var claimsWritten: Data? = nil

    func uploadFile(data: Data, attachment: AttachmentSync.Attachment) async throws {
        try await base.uploadFile(data: data, attachment: attachment)
    }
    func downloadFile(attachment: AttachmentSync.Attachment) async throws -> Data {
        let data = try await base.downloadFile(attachment: attachment)
        return data.prefix(data.count / 2)
    }
    func deleteFile(attachment: AttachmentSync.Attachment) async throws {
        try await base.deleteFile(attachment: attachment)
    }
    func downloadFile(
        attachment: AttachmentSync.Attachment, into destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws -> RemoteObjectInfo {
        let data = try await base.downloadFile(attachment: attachment)
        try data.prefix(data.count / 2).write(to: destination)
        return RemoteObjectInfo(
            size: reportsSize ? Int64(data.count) : nil, writtenSize: claimsWritten.map { Int64($0.count) },
            writtenSHA256: claimsWritten.map { FileStreaming.sha256($0) })
    }
}

@Suite("Every download is verified", .cleansUp)
struct VerifiedDownloadTests {
    @Test("another device's upload whose bytes do not match the SHA-256 stored with it is never synced")
    func remoteHashIsChecked() async throws {
        let device = try QueueHarness(watch: true)
        let remote = try device.memoryRemote
        // The object was damaged at rest: its bytes no longer match what the uploader stored with it.
        await remote.setFile(testBytes(100, seed: 9), named: "p1.jpg", sha256: FileStreaming.sha256(testBytes(100)))
        let events = device.queue.events
        try await device.addChecklist("c1", photo: "p1")
        try await device.queue.startSync()
        let failed = try await withDeadline("the failed download") {
            await events.first { if case .failed = $0 { true } else { false } }
        }
        guard case .failed(_, let error, _, _) = failed else { throw HarnessError("no failure") }
        #expect(error.code == .integrityMismatch)
        #expect(try await device.state(of: "p1") == .queuedDownload)
        #expect(try device.filesOnDisk().isEmpty, "the bad bytes were discarded")

        // Repaired upstream: downloaded, and the record learns the hash.
        await remote.setFile(testBytes(100), named: "p1.jpg", sha256: FileStreaming.sha256(testBytes(100)))
        try await device.queue.syncNow()
        let synced = try #require(try await device.queue.attachment(id: "p1"))
        #expect(synced.state == .synced)
        #expect(synced.contentHash == FileStreaming.sha256(testBytes(100)))
        #expect(device.bytesOnDisk("p1.jpg") == testBytes(100))
    }

    @Test("the hash a watched row carries is checked, whatever the remote says")
    func rowHashIsChecked() async throws {
        let device = try QueueHarness(
            customWatch: fixedWatch([
                try WatchedAttachmentItem(
                    id: "p1", fileExtension: "jpg", contentHash: FileStreaming.sha256(Data("right".utf8)))
            ]))
        let remote = try device.memoryRemote
        await remote.setFile(Data("wrong".utf8), named: "p1.jpg")
        try await device.queue.startSync()
        try await waitFor("the first download") { await remote.waitForCalls(.download, count: 1) }
        try await device.queue.syncNow()
        #expect(try await device.state(of: "p1") == .queuedDownload)
        #expect(try device.filesOnDisk().isEmpty)
    }

    @Test(
        "without a hash, a body cut short is caught by its size, reported by the remote or carried by the row",
        arguments: [true, false])
    func truncatedBodiesAreCaught(reportsSize: Bool) async throws {
        let base = InMemoryRemoteStorage()
        await base.setFile(testBytes(10_000), named: "p1.bin")
        let device = try QueueHarness(
            remote: TruncatingRemote(base: base, reportsSize: reportsSize),
            customWatch: fixedWatch([
                try WatchedAttachmentItem(id: "p1", fileExtension: "bin", size: reportsSize ? nil : 10_000)
            ]))
        try await device.queue.startSync()
        try await waitFor("the first download") { await base.waitForCalls(.download, count: 1) }
        try await device.queue.syncNow()
        let record = try #require(try await device.queue.attachment(id: "p1"))
        #expect(record.state == .queuedDownload, "never synced with half the bytes")
        #expect(try device.filesOnDisk().isEmpty)
        let status = try #require(await device.queue.status.first { _ in true })
        #expect(status.waitingForRetry.first?.lastError?.contains("5000 bytes long, expected 10000") == true)
    }

    @Test("a row that learns its attachment's hash after the record was made is honoured")
    func hashLearnedLater() async throws {
        let (emissions, emit) = AsyncThrowingStream.makeStream(of: [WatchedAttachmentItem].self)
        let device = try QueueHarness(customWatch: CustomWatch { _ in { emissions } })
        let remote = try device.memoryRemote
        await remote.hold()
        try await device.queue.startSync()
        emit.yield([try WatchedAttachmentItem(id: "p1", fileExtension: "jpg")])
        try await device.waitForRecord("p1")
        // The row now carries the hash; the remote keeps none and serves other bytes.
        await remote.setFile(Data("tampered".utf8), named: "p1.jpg")
        emit.yield([
            try WatchedAttachmentItem(
                id: "p1", fileExtension: "jpg", contentHash: FileStreaming.sha256(Data("right".utf8)))
        ])
        try await device.waitForColumn("content_hash", of: "p1", toBe: FileStreaming.sha256(Data("right".utf8)))
        await remote.release()
        try await device.queue.syncNow()
        #expect(try await device.state(of: "p1") == .queuedDownload)
        #expect(try device.filesOnDisk().isEmpty)
    }

    @Test("content downloaded before its row brought a hash is fetched again when the hash disagrees")
    func contentDisagreeingWithALaterHashIsRefetched() async throws {
        let (emissions, emit) = AsyncThrowingStream.makeStream(of: [WatchedAttachmentItem].self)
        let device = try QueueHarness(customWatch: CustomWatch { _ in { emissions } })
        let remote = try device.memoryRemote
        // Bytes damaged on the way, with no hash anywhere yet: nothing can tell.
        await remote.setFile(Data("damaged".utf8), named: "p1.jpg")
        try await device.queue.startSync()
        emit.yield([try WatchedAttachmentItem(id: "p1", fileExtension: "jpg")])
        try await device.waitForState("p1", .synced)
        #expect(device.bytesOnDisk("p1.jpg") == Data("damaged".utf8))

        // The row now carries the uploader's hash: the content is not trusted over it.
        await remote.setFile(Data("right".utf8), named: "p1.jpg")
        emit.yield([
            try WatchedAttachmentItem(
                id: "p1", fileExtension: "jpg", contentHash: FileStreaming.sha256(Data("right".utf8)))
        ])
        try await waitUntil("the right bytes") { device.bytesOnDisk("p1.jpg") == Data("right".utf8) }
        try await device.waitForState("p1", .synced)
        #expect(try await device.queue.attachment(id: "p1")?.contentHash == FileStreaming.sha256(Data("right".utf8)))
    }

    @Test("a watched row's size gives progress its total before the first byte arrives")
    func sizeFromRowGivesProgressTotal() async throws {
        let device = try QueueHarness(
            customWatch: fixedWatch([try WatchedAttachmentItem(id: "v", fileExtension: "bin", size: 300_000)])
        ) { $0.downloadPolicy = .onDemand }
        let remote = try device.memoryRemote
        await remote.setFile(testBytes(300_000), named: "v.bin")
        try await device.queue.startSync()
        try await device.waitForRecord("v")
        #expect(try await device.queue.attachment(id: "v")?.size == 300_000)

        await remote.hold()
        let updates = device.queue.progress(attachmentId: "v")
        let queue = device.queue
        let download = Task { try await queue.download(attachmentId: "v") }
        var iterator = updates.makeAsyncIterator()
        let first = try #require(await iterator.next())
        #expect(first.completedBytes == 0)
        #expect(first.totalBytes == 300_000)
        await remote.release()
        _ = try await download.value
        #expect(device.bytesOnDisk("v.bin") == testBytes(300_000))
    }
}
