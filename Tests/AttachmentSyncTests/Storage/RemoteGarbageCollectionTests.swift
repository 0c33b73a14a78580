import AttachmentSync
import AttachmentSyncTesting
import Foundation
import Testing

/// The garbage collection plan on a real folder remote and real databases, with the time injected.
@Suite("Remote garbage collection", .cleansUp)
struct RemoteGarbageCollectionTests {
    @Test("only files strictly older than the grace period are candidates; records of any state keep theirs")
    func graceBoundary() async throws {
        let remoteFolder = try TemporaryDirectory()
        let remote = FileSystemRemoteStorage(directory: remoteFolder.path("remote"))
        let device = try QueueHarness(remote: remote)
        _ = try await device.queue.saveFile(data: testBytes(100), mediaType: nil, fileExtension: "bin", id: "kept")
        _ = try await device.queue.saveFile(data: testBytes(100), mediaType: nil, fileExtension: "bin", id: "second")
        try await device.queue.syncNow()
        // A record still waiting for its upload keeps an object of its name (an earlier upload, say).
        try await remote.uploadFile(
            data: testBytes(50), attachment: Attachment(id: "x", filename: "pending.bin", state: .queuedUpload))
        _ = try await device.queue.saveFile(data: testBytes(50), mediaType: nil, fileExtension: "bin", id: "pending")
        let written = Date(timeIntervalSince1970: 1_800_000_000)
        try await remote.uploadFile(
            data: testBytes(10), attachment: Attachment(id: "o", filename: "orphan.bin", state: .synced))
        try FileManager.default.setAttributes(
            [.modificationDate: written],
            ofItemAtPath: try remote.fileURL(for: Attachment(id: "o", filename: "orphan.bin", state: .synced)).path)
        let grace = Duration.seconds(86_400)

        let atBoundary = try await RemoteGarbageCollection.plan(
            remote: remote, databases: [device.db], grace: grace, now: written.addingTimeInterval(86_400))
        #expect(atBoundary.listedFiles == 4)
        #expect(atBoundary.referencedFiles == 3)
        #expect(atBoundary.candidates.isEmpty)
        #expect(atBoundary.recent.map(\.storedName) == ["orphan.bin"])

        let past = try await RemoteGarbageCollection.plan(
            remote: remote, databases: [device.db], grace: grace, now: written.addingTimeInterval(86_401))
        #expect(past.candidates.map(\.storedName) == ["orphan.bin"])
        #expect(past.candidateBytes == 10)
        #expect(try await past.apply(to: remote) == 1)
        #expect(try await remote.allFiles().map(\.storedName) == ["kept.bin", "pending.bin", "second.bin"])
        await device.queue.close()
    }

    @Test("no database, or a negative grace period, is a typed error and nothing is listed or deleted")
    func refusesToGuess() async throws {
        let remoteFolder = try TemporaryDirectory()
        let remote = FileSystemRemoteStorage(directory: remoteFolder.path("remote"))
        try await remote.uploadFile(
            data: testBytes(10), attachment: Attachment(id: "a", filename: "a.bin", state: .synced))
        let device = try QueueHarness(remote: remote)
        let none = await #expect(throws: AttachmentError.self) {
            _ = try await RemoteGarbageCollection.plan(remote: remote, databases: [], grace: .zero)
        }
        #expect(none?.code == .invalidConfiguration)
        let negative = await #expect(throws: AttachmentError.self) {
            _ = try await RemoteGarbageCollection.plan(remote: remote, databases: [device.db], grace: .seconds(-1))
        }
        #expect(negative?.code == .invalidConfiguration)
        let badTable = await #expect(throws: AttachmentError.self) {
            _ = try await RemoteGarbageCollection.plan(remote: remote, databases: [device.db], table: "no table")
        }
        #expect(badTable?.code == .invalidName)
        #expect(try await remote.allFiles().count == 1)
    }
}
