import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// Two devices save different content under one id (a reinstall that reused ids, say) over one real folder
/// remote: the second upload never replaces the first; the app decides.
@Suite("Upload conflicts", .cleansUp)
struct UploadConflictTests {
    static func devices() throws -> (QueueHarness, QueueHarness, FileSystemRemoteStorage, TemporaryDirectory) {
        let folder = try TemporaryDirectory()
        let remote = FileSystemRemoteStorage(directory: folder.path("remote"))
        return (try QueueHarness(remote: remote), try QueueHarness(remote: remote), remote, folder)
    }

    static func remoteBytes(_ remote: FileSystemRemoteStorage, _ name: String) throws -> Data? {
        FileManager.default.contents(
            atPath: try remote.fileURL(for: Attachment(id: "x", filename: name, state: .synced)).path)
    }

    @Test("other content under the same id is a conflict: given up at once, both contents kept, then resolved")
    func conflictKeepsBoth() async throws {
        let (phoneA, phoneB, remote, _) = try Self.devices()
        let mine = testBytes(3_000, seed: 1)
        let theirs = testBytes(3_000, seed: 2)
        _ = try await phoneA.queue.saveFile(data: theirs, mediaType: nil, fileExtension: "jpg", id: "photo")
        try await phoneA.queue.syncNow()
        let events = phoneB.queue.events
        _ = try await phoneB.queue.saveFile(data: mine, mediaType: nil, fileExtension: "jpg", id: "photo")
        try await phoneB.queue.syncNow()

        let gaveUp = try await withDeadline("the gaveUp event") { () -> (String, AttachmentError, Int)? in
            for await event in events {
                if case .gaveUp(let id, let error, let attempts) = event { return (id, error, attempts) }
            }
            return nil
        }
        #expect(gaveUp?.0 == "photo")
        #expect(gaveUp?.1.code == .conflict)
        #expect(gaveUp?.2 == 1, "given up at the first answer, no retries")
        let record = try #require(try await phoneB.queue.attachment(id: "photo"))
        #expect(record.state == .archived && record.givenUp == .queuedUpload && !record.hasSynced)
        #expect(phoneB.bytesOnDisk("photo.jpg") == mine, "this device's bytes are kept")
        #expect(try Self.remoteBytes(remote, "photo.jpg") == theirs, "the other device's are not replaced")

        // Keeping the remote's: this device fetches the other content.
        let resolved = try await phoneB.queue.resolveConflict(attachmentId: "photo", keeping: .remote)
        #expect(resolved.state == .queuedDownload)
        try await phoneB.queue.syncNow()
        #expect(try await phoneB.state(of: "photo") == .synced)
        #expect(phoneB.bytesOnDisk("photo.jpg") == theirs)
        await #expect(throws: AttachmentError.self) {
            try await phoneB.queue.resolveConflict(attachmentId: "photo", keeping: .local)
        }
        await phoneA.queue.close()
        await phoneB.queue.close()
    }

    @Test("keeping this device's content replaces the remote file; the same content is no conflict at all")
    func keepLocalAndSameContent() async throws {
        let (phoneA, phoneB, remote, _) = try Self.devices()
        let mine = testBytes(2_500, seed: 5)
        _ = try await phoneA.queue.saveFile(
            data: testBytes(2_500, seed: 6), mediaType: nil, fileExtension: "jpg", id: "p")
        try await phoneA.queue.syncNow()
        _ = try await phoneB.queue.saveFile(data: mine, mediaType: nil, fileExtension: "jpg", id: "p")
        try await phoneB.queue.syncNow()
        #expect(try await phoneB.queue.attachment(id: "p")?.givenUp == .queuedUpload)
        _ = try await phoneB.queue.resolveConflict(attachmentId: "p", keeping: .local)
        try await phoneB.queue.syncNow()
        #expect(try await phoneB.state(of: "p") == .synced)
        #expect(try Self.remoteBytes(remote, "p.jpg") == mine)

        // Identical bytes under one id (the same photo saved twice): the second upload just succeeds.
        let same = testBytes(1_000, seed: 9)
        _ = try await phoneA.queue.saveFile(data: same, mediaType: nil, fileExtension: "jpg", id: "twin")
        _ = try await phoneB.queue.saveFile(data: same, mediaType: nil, fileExtension: "jpg", id: "twin")
        try await phoneA.queue.syncNow()
        try await phoneB.queue.syncNow()
        #expect(try await phoneB.state(of: "twin") == .synced)
        #expect(try await phoneA.state(of: "twin") == .synced)
        await phoneA.queue.close()
        await phoneB.queue.close()
    }
}
