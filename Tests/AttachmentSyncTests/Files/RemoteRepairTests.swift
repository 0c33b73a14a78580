import AttachmentSync
import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

/// Remote files checked against records, and what remote storage lost uploaded again from intact local
/// files, on a real folder remote.
@Suite("Repairing remote files", .cleansUp)
struct RemoteRepairTests {
    @Test("lost or cut remote files are found and uploaded again from intact local files; a lost only copy is reported")
    func reuploadsWhatTheRemoteLost() async throws {
        let remoteFolder = try FolderRemote()
        let remote = remoteFolder.storage
        let contents = [
            "lost": testBytes(3_000), "cut": testBytes(2_000), "gone": testBytes(1_000), "fine": testBytes(500),
        ]
        let device = try await remoteFolder.device(
            uploading: contents.sorted(by: { $0.key < $1.key }).map { ($0.key, $0.value) })
        let clean = try await RemoteVerification.verify(db: device.db, remote: remote)
        #expect(clean.isClean && clean.checkedFiles == 4)

        func remotePath(_ id: String) throws -> String { try remoteFolder.file(ofId: id) }
        try FileManager.default.removeItem(atPath: try remotePath("lost"))
        try Data(testBytes(10)).write(to: URL(fileURLWithPath: try remotePath("cut")))
        // Lost on both sides: the remote's copy and this device's.
        try FileManager.default.removeItem(atPath: try remotePath("gone"))
        try FileManager.default.removeItem(atPath: device.folder.path("attachments/gone.bin"))

        let found = try await RemoteVerification.verify(db: device.db, remote: remote)
        #expect(found.findings.map(\.attachmentId) == ["cut", "gone", "lost"])
        #expect(found.findings.map(\.problem) == [.wrongSize(expected: 2_000, actual: 10), .missing, .missing])

        let repair = try await device.queue.repairRemoteFiles()
        #expect(repair.reuploading.sorted() == ["cut", "lost"])
        #expect(repair.leftAlone.map(\.attachmentId) == ["gone"])
        #expect(try await device.state(of: "lost") == .queuedUpload)
        try await device.queue.syncNow()
        for id in ["lost", "cut", "fine"] {
            #expect(FileManager.default.contents(atPath: try remotePath(id)) == contents[id], "\(id) on the remote")
            #expect(try await device.state(of: id) == .synced)
        }
        let after = try await RemoteVerification.verify(db: device.db, remote: remote)
        #expect(after.findings.map(\.attachmentId) == ["gone"], "only the copy lost everywhere is left")
        await device.queue.close()
    }

    @Test("another device's different upload under the same name is found by its stored hash and never replaced")
    func otherUploadIsAConflict() async throws {
        let remoteFolder = try FolderRemote()
        let remote = remoteFolder.storage
        let mine = testBytes(4_096)
        let device = try await remoteFolder.device(uploading: [("photo", mine)])
        let theirs = Data(testBytes(4_096).reversed())
        let file = Attachment(id: "photo", filename: "photo.bin", state: .synced)
        // Another device's upload under the same name (uploads never replace: it deleted ours first).
        try await remote.deleteFile(attachment: file)
        try await remote.uploadFile(
            data: theirs,
            attachment: Attachment(
                id: "photo", filename: "photo.bin", state: .synced, contentHash: FileStreaming.sha256(theirs)))

        let found = try await RemoteVerification.verify(db: device.db, remote: remote)
        #expect(
            found.findings.map(\.problem) == [
                .wrongHash(expected: FileStreaming.sha256(mine), actual: FileStreaming.sha256(theirs))
            ])
        let repair = try await device.queue.repairRemoteFiles()
        #expect(repair.reuploading.isEmpty)
        #expect(repair.leftAlone.map(\.attachmentId) == ["photo"])
        try await device.queue.syncNow()
        #expect(try await remote.downloadFile(attachment: file) == theirs, "the other upload is kept")
        #expect(device.bytesOnDisk("photo.bin") == mine, "and so is this device's content")
        await device.queue.close()
    }

    @Test("a remote that cannot describe its files is a typed error, and nothing changes")
    func unlistableRemote() async throws {
        let device = try QueueHarness(remote: SeedStyleRemote())
        _ = try await device.queue.saveFile(data: testBytes(100), mediaType: nil, fileExtension: "bin", id: "a")
        try await device.queue.syncNow()
        let error = await #expect(throws: AttachmentError.self) { try await device.queue.repairRemoteFiles() }
        #expect(error?.code == .unsupported)
        #expect(error?.message.contains("SeedStyleRemote") == true)
        #expect(try await device.state(of: "a") == .synced)
        await device.queue.close()
    }
}
