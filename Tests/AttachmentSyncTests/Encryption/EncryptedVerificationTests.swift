import AttachmentSync
import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

/// Remote files of an app that encrypts them, checked without keys (`RemoteVerification` with
/// `encrypted: true`), and a repair through a remote that does not encrypt refused before it uploads plain
/// content.
@Suite("Verifying encrypted remote files", .cleansUp)
struct EncryptedVerificationTests {
    @Test(
        "encrypted files pass by their size, cut or lost ones are found, plain ones that match pass; a plain repair refuses"
    )
    func verifyWithoutKeys() async throws {
        let remoteFolder = try FolderRemote()
        let bare = remoteFolder.storage
        let keys = StaticKeyProvider(keys: EncryptedFormatTests.keys, current: "k1")
        let folder = try TemporaryDirectory()
        let contents = [
            "big": testBytes(200_000), "cut": testBytes(70_000), "empty": Data(), "legacy": testBytes(3_000),
            "lost": testBytes(1_000),
        ]
        let device = try QueueHarness(folder: folder, remote: EncryptedRemoteStorage(wrapping: bare, keys: keys))
        for (id, data) in contents.sorted(by: { $0.key < $1.key }) {
            _ = try await device.queue.saveFile(data: data, mediaType: nil, fileExtension: "bin", id: id)
        }
        try await device.queue.syncNow()
        await device.queue.close()
        let db = device.db

        let clean = try await RemoteVerification.verify(db: db, remote: bare, encrypted: true)
        #expect(clean.isClean, "\(clean.findings)")
        #expect(clean.checkedFiles == 5)
        let asPlain = try await RemoteVerification.verify(db: db, remote: bare)
        #expect(asPlain.findings.count == 5, "checked as plain files, every encrypted one is the wrong size")

        // A file stored plain before encryption was turned on, matching its record, passes.
        let legacy = Attachment(id: "legacy", filename: "legacy.bin", state: .synced)
        try await bare.deleteFile(attachment: legacy)
        try await bare.uploadFile(
            data: try #require(contents["legacy"]),
            attachment: Attachment(
                id: "legacy", filename: "legacy.bin", state: .synced, size: 3_000,
                contentHash: FileStreaming.sha256(try #require(contents["legacy"]))))
        // One cut short, one lost.
        let cutPath = try remoteFolder.file(ofId: "cut")
        let cutSize = try #require(FileManager.default.attributesOfItem(atPath: cutPath)[.size] as? Int)
        try Data(try #require(FileManager.default.contents(atPath: cutPath)).prefix(cutSize - 16))
            .write(to: URL(fileURLWithPath: cutPath))
        try FileManager.default.removeItem(atPath: try remoteFolder.file(ofId: "lost"))

        let found = try await RemoteVerification.verify(db: db, remote: bare, encrypted: true)
        #expect(found.findings.map(\.attachmentId) == ["cut", "lost"])
        #expect(
            found.findings.map(\.problem) == [
                .wrongEncryptedSize(contentSize: 70_000, actual: Int64(cutSize - 16)), .missing,
            ])

        // A tool's queue over the bare remote must not upload the lost file again: it would be plain.
        let lostPath = try remoteFolder.file(ofId: "lost")
        let tool = try QueueHarness(folder: folder, remote: bare)
        do {
            _ = try await tool.queue.repairRemoteFiles()
            Issue.record("the repair went ahead through a remote that does not encrypt")
        } catch let error as AttachmentError {
            #expect(error.code == .invalidConfiguration)
        }
        try await tool.queue.syncNow()
        #expect(!FileManager.default.fileExists(atPath: lostPath), "nothing uploaded in the clear")
        #expect(try await tool.state(of: "lost") == .synced, "no record changed")
        await tool.queue.close()
    }
}
