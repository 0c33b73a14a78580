import AttachmentSync
import AttachmentSyncTesting
import Foundation
import Testing

/// The garbage collection plan on a real folder remote and real databases, with the time injected.
@Suite("Remote garbage collection", .cleansUp)
struct RemoteGarbageCollectionTests {
    @Test("only files strictly older than the grace period are candidates; records of any state keep theirs")
    func graceBoundary() async throws {
        let remoteFolder = try FolderRemote()
        let remote = remoteFolder.storage
        let device = try await remoteFolder.device(uploading: [("kept", testBytes(100)), ("second", testBytes(100))])
        // A record still waiting for its upload keeps an object of its name (an earlier upload, say).
        try await remote.uploadFile(
            data: testBytes(50), attachment: Attachment(id: "x", filename: "pending.bin", state: .queuedUpload))
        _ = try await device.queue.saveFile(data: testBytes(50), mediaType: nil, fileExtension: "bin", id: "pending")
        let written = Date(timeIntervalSince1970: 1_800_000_000)
        try await remoteFolder.upload(
            testBytes(10), as: Attachment(id: "o", filename: "orphan.bin", state: .synced), writtenAt: written)
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

    @Test("only files with the library's stored SHA-256 are candidates; the rest are foreign, and apply checks again")
    func foreignFilesAreKept() async throws {
        let remoteFolder = try FolderRemote()
        let folder = remoteFolder.path
        let remote = remoteFolder.storage
        let device = try await remoteFolder.device(uploading: [("kept", testBytes(100))])
        let written = Date(timeIntervalSince1970: 1_800_000_000)
        let orphans = ["orphan.bin", "replaced.bin", "Long Name ".padding(toLength: 200, withPad: "x", startingAt: 0)]
        for name in orphans {
            try await remoteFolder.upload(
                testBytes(10), as: Attachment(id: "o", filename: name, state: .synced), writtenAt: written)
        }
        // Another tool's files: a name no attachment has (uppercase is escaped in the folder), and names an
        // attachment could have, without a stored hash; and a stored hash that is not one.
        for name in [".DS_Store", "readme.txt", "kept2.bin", "bad-hash.bin"] {
            try remoteFolder.place(testBytes(20), named: name, writtenAt: written)
        }
        try remoteFolder.place(Data("not a hash".utf8), named: ".attachment-sync-sha256-bad-hash.bin")

        let plan = try await RemoteGarbageCollection.plan(
            remote: remote, databases: [device.db], grace: .seconds(86_400), now: written.addingTimeInterval(86_401))
        let shortened = try remote.storedName(forFilename: orphans[2])
        #expect(plan.candidates.map(\.storedName) == [shortened, "orphan.bin", "replaced.bin"])
        #expect(plan.foreign.map(\.storedName) == [".DS_Store", "bad-hash.bin", "kept2.bin", "readme.txt"])
        #expect(plan.recent.isEmpty)
        #expect(plan.referencedFiles == 1)

        // Between the plan and its application another tool puts its own file under one of the names.
        let replaced = (folder as NSString).appendingPathComponent("replaced.bin")
        try FileManager.default.removeItem(
            atPath: (folder as NSString).appendingPathComponent(
                ".attachment-sync-sha256-replaced.bin"))
        try Data("someone else's".utf8).write(to: URL(fileURLWithPath: replaced))
        #expect(try await plan.apply(to: remote) == 2)
        #expect(try Data(contentsOf: URL(fileURLWithPath: replaced)) == Data("someone else's".utf8))
        let left = Set(try FileManager.default.contentsOfDirectory(atPath: folder))
        #expect(
            left == [
                "kept.bin", ".attachment-sync-sha256-kept.bin", ".DS_Store", "readme.txt", "kept2.bin", "bad-hash.bin",
                ".attachment-sync-sha256-bad-hash.bin", "replaced.bin",
            ])
        await device.queue.close()
    }

    @Test("a folder remote's interrupted uploads and hashes of deleted files are collected once old; nothing else")
    func folderLeftovers() async throws {
        let remoteFolder = try FolderRemote()
        let folder = remoteFolder.path
        let remote = remoteFolder.storage
        let device = try await remoteFolder.device(uploading: [("kept", testBytes(100))])
        // What crashes and other tools leave: an upload's copy never linked, a hash whose file was deleted by
        // hand; and what an upload in progress has, just written.
        let written = Date(timeIntervalSince1970: 1_800_000_000)
        let names = [
            "interrupted": ".attachment-sync-tmp-0a1b2c3d-6F9619FF-8B86-D011-B42D-00C04FC964FF",
            "orphanHash": ".attachment-sync-sha256-gone.bin",
            "inProgress": ".attachment-sync-tmp-0a1b2c3d-0B3F7C1E-2D4A-4E5B-9C6D-7E8F9A0B1C2D",
        ]
        for (key, name) in names {
            // The upload in progress wrote its copy a moment before the plan's "now".
            let modified = key == "inProgress" ? written.addingTimeInterval(86_391) : written
            try remoteFolder.place(testBytes(key == "interrupted" ? 4_000 : 64), named: name, writtenAt: modified)
        }
        let liveHash = ".attachment-sync-sha256-kept.bin"
        try FolderRemote.date((folder as NSString).appendingPathComponent(liveHash), written)

        let plan = try await RemoteGarbageCollection.plan(
            remote: remote, databases: [device.db], grace: .seconds(86_400), now: written.addingTimeInterval(86_401))
        #expect(plan.candidates.isEmpty, "the attachment's file is referenced")
        #expect(plan.leftovers.map(\.storedName) == [names["orphanHash"]!, names["interrupted"]!])
        #expect(plan.leftoverBytes == 4_064)
        #expect(try await plan.apply(to: remote) == 2)

        let left = Set(try FileManager.default.contentsOfDirectory(atPath: folder))
        #expect(left == ["kept.bin", liveHash, names["inProgress"]!])
        let info = try await remote.fileInfo(attachment: Attachment(id: "kept", filename: "kept.bin", state: .synced))
        #expect(info?.sha256 == FileStreaming.sha256(testBytes(100)), "the live file keeps its stored hash")

        // A hash whose file came back meanwhile is that file's; a name that is not the adapter's is refused.
        try await remote.deleteLeftover(
            RemoteFile(storedName: liveHash, filename: nil, size: 64, lastModified: written))
        #expect(FileManager.default.fileExists(atPath: (folder as NSString).appendingPathComponent(liveHash)))
        let refused = await #expect(throws: AttachmentError.self) {
            try await remote.deleteLeftover(
                RemoteFile(storedName: "kept.bin", filename: "kept.bin", size: 100, lastModified: written))
        }
        #expect(refused?.code == .invalidName)
        #expect(device.bytesOnDisk("kept.bin") != nil)
        #expect(FileManager.default.fileExists(atPath: (folder as NSString).appendingPathComponent("kept.bin")))
        await device.queue.close()
    }

    @Test("no database, or a negative grace period, is a typed error and nothing is listed or deleted")
    func refusesToGuess() async throws {
        let remoteFolder = try FolderRemote()
        let remote = remoteFolder.storage
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
