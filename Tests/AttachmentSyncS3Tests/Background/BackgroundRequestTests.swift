import AttachmentSync
import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// Requests formed ahead of time by the S3 and presigned adapters, run by the spooled service in a process
/// of its own against Ceph: what a background `URLSession` would send.
@Suite("Background transfer requests on Ceph")
struct BackgroundRequestTests {
    static func attachment(_ name: String, _ content: Data) -> AttachmentSync.Attachment {
        AttachmentSync.Attachment(
            id: name, filename: name, state: .queuedUpload, mediaType: "image/jpeg", size: Int64(content.count),
            contentHash: FileStreaming.sha256(content))
    }

    /// Runs `transfer` in the service and returns its result, acknowledged.
    static func run(_ transfer: BackgroundTransfer, in service: SpoolTransferService) async throws
        -> BackgroundTransferResult
    {
        try await service.hand(transfer)
        let result = try #require(
            try await SpoolTransferServiceTests.waitForResults(service, [transfer.id])[transfer.id])
        if let body = result.bodyFile {
            let kept = body.deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent(transfer.id)
            try FileManager.default.copyItem(at: body, to: kept)
            try await service.acknowledge(transfer.id)
            return BackgroundTransferResult(
                id: result.id, statusCode: result.statusCode, headers: result.headers, bodyFile: kept)
        }
        try await service.acknowledge(transfer.id)
        return result
    }

    /// Checks an adapter's formed requests: the upload stores the file with its SHA-256, runs only once, a
    /// changed file is refused by the server, the download brings the bytes back.
    static func check(_ remote: some BackgroundTransferForming, folder: URL) async throws {
        let spool = try SpoolTransferService(folder: folder.appendingPathComponent("spool"))
        let process = try SpoolTransferServiceTests.startService(spool.spool.root)
        defer { process.kill() }
        let content = testBytes(count: 300_000, seed: 31)
        let file = folder.appendingPathComponent("photo.jpg")
        try content.write(to: file)
        let photo = attachment("photo.jpg", content)

        let upload = try #require(try await remote.backgroundUploadRequest(for: photo, fileURL: file))
        let first = try await run(
            BackgroundTransfer(id: "up-1", direction: .upload, request: upload, bodyFile: file), in: spool)
        #expect(first.statusCode == 200, "\(first)")
        let stored = try #require(try await remote.storedObject(for: photo))
        #expect(stored.size == Int64(content.count))
        #expect(stored.sha256 == photo.contentHash)

        // The same request run again (a service that reported it twice, or ran it after a lost report).
        let second = try await run(
            BackgroundTransfer(id: "up-2", direction: .upload, request: upload, bodyFile: file), in: spool)
        #expect(second.statusCode == 412, "create-only: \(second)")

        // A file changed between forming the request and the service sending it.
        let other = attachment("other.jpg", content)
        let otherFile = folder.appendingPathComponent("other.jpg")
        try content.write(to: otherFile)
        let otherUpload = try #require(try await remote.backgroundUploadRequest(for: other, fileURL: otherFile))
        try testBytes(count: content.count, seed: 32).write(to: otherFile)
        let refused = try await run(
            BackgroundTransfer(id: "up-3", direction: .upload, request: otherUpload, bodyFile: otherFile), in: spool)
        #expect(refused.statusCode == 400, "the server checks Content-MD5: \(refused)")
        #expect(try await remote.storedObject(for: other) == nil)

        let download = try #require(try await remote.backgroundDownloadRequest(for: photo))
        let fetched = try await run(
            BackgroundTransfer(id: "down-1", direction: .download, request: download), in: spool)
        #expect(fetched.statusCode == 200)
        #expect(try Data(contentsOf: try #require(fetched.bodyFile)) == content)
        #expect(fetched.header("x-amz-meta-sha256") == photo.contentHash)
    }

    @Test("S3RemoteStorage: a presigned upload stores the file once with its SHA-256; a changed file is refused")
    func s3Requests() async throws {
        try await S3TestBucket.with("bg-s3") { storage, _ in
            try await withTemporaryDirectory { folder in try await Self.check(storage, folder: folder) }
        }
    }

    @Test("PresignedRemoteStorage: the backend's authorisations run from another process the same way")
    func presignedRequests() async throws {
        try await S3TestBucket.with("bg-presigned") { _, bucket in
            let issuer = try PresignedRemoteStorageTests.issuer(bucket)
            let device = try PresignedRemoteStorageTests.device(bucket) { try await issuer.authorize($0) }
            do {
                try await withTemporaryDirectory { folder in try await Self.check(device, folder: folder) }
            } catch {
                try? await device.shutdown()
                throw error
            }
            try await device.shutdown()
        }
    }

    @Test("a file above the multipart threshold is not formed for the background: it stays in-process")
    func largeFilesStayInProcess() async throws {
        let configure: (inout S3RemoteStorage.Configuration) -> Void = { $0.multipartThreshold = 5 << 20 }
        try await S3TestBucket.with("bg-large", configure: configure) { storage, _ in
            try await withTemporaryDirectory { folder in
                let content = testBytes(count: (5 << 20) + 1, seed: 33)
                let file = folder.appendingPathComponent("big.bin")
                try content.write(to: file)
                #expect(
                    try await storage.backgroundUploadRequest(for: Self.attachment("big.bin", content), fileURL: file)
                        == nil)
            }
        }
    }
}
