import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

@Suite("Results committed per attachment, conditionally", .cleansUp)
struct ConcurrencyTests {
    @Test("a download that finishes after its attachment was archived does not mark it synced or leave its file")
    func downloadAfterArchive() async throws {
        let device = try QueueHarness(watch: true)
        let remote = try device.memoryRemote
        await remote.setFile(testBytes(10), named: "p1.jpg")
        await remote.hold()
        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: "p1")
        await remote.waitForInFlight(count: 1)

        try await device.setPhoto(checklist: "c1", photo: nil)
        try await device.waitForState("p1", .archived)
        await remote.release()
        try await device.queue.syncNow()

        #expect(try await device.state(of: "p1") == .archived)
        #expect(try device.filesOnDisk().isEmpty)
    }

    @Test("deleteFile during an upload wins: the record is not marked synced and the remote copy is deleted")
    func deleteDuringUpload() async throws {
        let device = try QueueHarness()
        let remote = try device.memoryRemote
        let saved = try await device.startStuckUpload()

        try await device.queue.deleteFile(attachmentId: saved.id) { _, _ in }
        #expect(try await device.state(of: saved.id) == .queuedDelete)
        await remote.release()
        try await device.waitForState(saved.id, nil)

        #expect(await remote.file(named: saved.filename) == nil, "the remote copy must not be orphaned")
        #expect(try device.filesOnDisk().isEmpty)
    }

    @Test("saveFile completes while transfers are stuck in flight")
    func saveIsNotBlockedByTransfers() async throws {
        let device = try QueueHarness()
        let remote = try device.memoryRemote
        _ = try await device.startStuckUpload()

        var saved: [String] = []
        for n in 0..<10 {
            saved.append(
                try await device.queue.saveFile(
                    data: testBytes(100, seed: UInt8(n)), mediaType: nil, fileExtension: "jpg"
                ).id)
        }
        for (n, id) in saved.enumerated() {
            #expect(device.bytesOnDisk("\(id).jpg") == testBytes(100, seed: UInt8(n)))
        }
        #expect(await remote.uploadCount <= 4, "the stuck transfers are still stuck")
        await remote.release()
        for id in saved { try await device.waitForState(id, .synced) }
    }

    @Test("stopSync returns while a transfer is stuck, and interrupts it")
    func stopSyncIsPrompt() async throws {
        let device = try QueueHarness()
        let remote = try device.memoryRemote
        _ = try await device.startStuckUpload()
        try await withDeadline(seconds: 10, "stopSync to return") { await device.queue.stopSync() }
        try await waitFor("the stuck call to be cancelled") { await remote.waitUntilNoCallInFlight() }
    }

    @Test("transfers run in parallel up to maxConcurrentTransfers, oldest first")
    func boundedParallelism() async throws {
        let device = try QueueHarness { $0.maxConcurrentTransfers = 3 }
        let remote = try device.memoryRemote
        var ids: [String] = []
        for n in 0..<7 {
            ids.append(
                try await device.queue.saveFile(
                    data: testBytes(10, seed: UInt8(n)), mediaType: nil, fileExtension: "jpg"
                ).id)
        }
        await remote.hold()
        let sync = Task { try await device.queue.syncNow() }
        await remote.waitForInFlight(count: 3)
        #expect(Set(await remote.callLog.map(\.filename)) == Set(ids.prefix(3).map { "\($0).jpg" }))
        await remote.release()
        try await sync.value
        #expect(await remote.maxConcurrentCalls == 3)
        for id in ids { #expect(try await device.state(of: id) == .synced) }
    }

    @Test("syncNow returns only when every queued upload is done, at any concurrency", arguments: [1, 4, 16])
    func syncNowWaitsForEverything(concurrency: Int) async throws {
        let device = try QueueHarness { $0.maxConcurrentTransfers = concurrency }
        var ids: [String] = []
        for n in 0..<150 {
            ids.append(
                try await device.queue.saveFile(
                    data: testBytes(64, seed: UInt8(n % 251)), mediaType: nil, fileExtension: "bin"
                ).id)
        }
        try await device.queue.syncNow()
        #expect(try await device.queue.attachments(in: .queuedUpload).isEmpty)
        #expect(try await device.queue.attachments(in: .synced).count == 150)
        #expect(try await device.memoryRemote.files.count == 150)
        await device.close()
    }

    @Test("close is idempotent and later calls throw closed")
    func closeTwice() async throws {
        let device = try QueueHarness()
        try await device.queue.startSync()
        await device.queue.close()
        await device.queue.close()
        let error = await #expect(throws: AttachmentError.self) {
            try await device.queue.saveFile(data: Data(), mediaType: nil, fileExtension: "jpg")
        }
        #expect(error?.code == .closed)
        try await device.db.close()
    }
}
