import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// Transfer priorities: the pure choice of what to pause, and queues whose raised attachments and downloads
/// asked for overtake the backlog without losing the bytes of what they paused.
@Suite("Priorities", .cleansUp)
struct PriorityTests {
    typealias Machine = QueueStateMachine<Int, Int>

    static func record(_ id: String, _ state: AttachmentState, timestamp: Int64 = 0) -> AttachmentRecord {
        AttachmentRecord(id: id, filename: "\(id).jpg", state: state, timestamp: timestamp)
    }

    /// A syncing machine of `bound` slots running the given records, handles numbered from 1.
    static func running(_ records: [AttachmentRecord], bound: Int) throws -> Machine {
        var machine = Machine(maxConcurrentTransfers: bound)
        machine.syncStarted()
        let read = machine.readQueued().read
        let outcome = machine.recordsRead(try #require(read), records: records, earliestRetry: nil, now: 0)
        for (index, record) in outcome.start.enumerated() { machine.started(record.id, handle: index + 1) }
        return machine
    }

    @Test("the transfer paused is the lowest-priority one, the latest started among equals, never a delete")
    func choosesWhatToPause() throws {
        var machine = try Self.running(
            [
                Self.record("up", .queuedUpload), Self.record("d1", .queuedDownload),
                Self.record("d2", .queuedDownload),
                Self.record("del", .queuedDelete),
            ], bound: 4)
        // d2 started after d1: it has moved the least.
        #expect(machine.transferToPause(for: 3)?.id == "d2")
        _ = machine.transferFinished("d2", state: .queuedDownload, .done)
        // A slot is free: nothing needs to pause.
        #expect(machine.transferToPause(for: 3) == nil)
        machine.startedOnRequest("asked", state: .synced, handle: 9)
        #expect(machine.transferToPause(for: 4)?.id == "d1")
        _ = machine.transferFinished("d1", state: .queuedDownload, .done)
        machine.startedOnRequest("asked2", state: .synced, handle: 10)
        // Downloads gone: an upload pauses for a download asked for, a delete or an asked download never.
        #expect(machine.transferToPause(for: 4)?.id == "up")
        #expect(machine.transferToPause(for: 2) == nil, "an upload does not pause another upload")
    }

    @Test("a raised record pauses the lowest transfer, then starts first, whatever its retry time or order")
    func raisedStartsFirst() throws {
        var machine = try Self.running([Self.record("d1", .queuedDownload)], bound: 1)
        let raise = machine.raise("late")
        #expect(raise.cancel == [1])
        #expect(raise.read == nil)
        let finished = machine.transferFinished("d1", state: .queuedDownload, .cancelled)
        let read = try #require(finished.read)
        var late = Self.record("late", .queuedDownload, timestamp: 99)
        late.nextAttemptAt = 1_000_000
        let outcome = machine.recordsRead(
            read, records: [late, Self.record("d1", .queuedDownload), Self.record("d3", .queuedDownload), late],
            earliestRetry: nil, now: 0)
        #expect(outcome.start.map(\.id) == ["late"])
        machine.started("late", handle: 5)
        _ = machine.transferFinished("late", state: .queuedDownload, .done)
        #expect(machine.raisedIDs.isEmpty, "the raise ends with its transfer")

        // Raising an id with nothing queued is let go at the next read, not kept for ever.
        _ = machine.raise("synced-already")
        #expect(machine.raisedIDs == ["synced-already"])
        let nextRead = machine.readQueued().read
        _ = machine.recordsRead(
            try #require(nextRead), records: [Self.record("d3", .queuedDownload)], earliestRetry: nil, now: 0)
        #expect(machine.raisedIDs.isEmpty)
    }

    @Test("a raised record that cannot start (it waits for Wi-Fi) does not make the read ask again and again")
    func raisedButBlockedDoesNotLoop() throws {
        // Found by the model-based histories: the raised record, read twice (by id and in order), looked
        // like a stale row, so every read asked for another and a syncNow never returned.
        var machine = Machine(maxConcurrentTransfers: 2)
        _ = machine.manualRoundStarted()
        _ = machine.networkChanged(.expensive)
        // A slot is free: the raise asks for a read at once.
        let read = machine.raise("big").read
        let big = Self.record("big", .queuedUpload)
        let outcome = machine.recordsRead(
            try #require(read), records: [big, big], earliestRetry: nil, now: 0, requirement: { _ in .unmetered })
        #expect(outcome.start.isEmpty)
        #expect(outcome.read == nil)
        #expect(machine.isIdle)
    }

    @Test("a paused transfer is not held back until the next trigger, even in a syncNow round")
    func pausedIsNotSkipped() throws {
        var machine = Machine(maxConcurrentTransfers: 1)
        _ = machine.manualRoundStarted()
        let read = machine.readQueued().read
        let outcome = machine.recordsRead(
            try #require(read), records: [Self.record("d1", .queuedDownload)], earliestRetry: nil, now: 0)
        #expect(outcome.start.count == 1)
        machine.started("d1", handle: 1)
        let step = machine.downloadAsked("asked", record: Self.record("asked", .synced))
        guard case .start(_, _, let pausing) = step else {
            Issue.record("a download asked for starts, not \(step)")
            return
        }
        #expect(pausing == [1], "the background download 'd1' pauses for it")
        machine.startedOnRequest("asked", state: .synced, handle: 2)
        _ = machine.transferFinished("d1", state: .queuedDownload, .cancelled)
        #expect(machine.waitingForTrigger("d1") == nil)
    }

    @Test("raising a queued download pauses the one in flight (keeping its bytes), which resumes after")
    func raiseOvertakesAndResumes() async throws {
        let remote = InMemoryRemoteStorage()
        let device = try QueueHarness(watch: true, remote: remote) { $0.maxConcurrentTransfers = 1 }
        let big = testBytes(5000, seed: 1)
        let small = testBytes(500, seed: 2)
        await remote.setFile(big, named: "big.jpg")
        await remote.setFile(small, named: "small.jpg")
        await remote.holdDownloads(atByte: 1000)
        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: "big")
        try await withDeadline("the big download to stop at byte 1000") { await remote.waitForHeldDownload() }
        try await device.addChecklist("c2", photo: "small")
        try await device.waitForRecord("small")

        try await device.queue.raisePriority(attachmentId: "small")
        try await device.waitForState("small", .synced)
        #expect(device.bytesOnDisk("small.jpg") == small)
        #expect(try await device.state(of: "big") == .queuedDownload)

        await remote.release()
        try await device.waitForState("big", .synced)
        #expect(device.bytesOnDisk("big.jpg") == big)
        // The big file's first 1,000 bytes were not fetched twice.
        #expect(await remote.bytesServed == 5000 + 500)
    }

    @Test("this device's uploads go before the downloads queued ahead of them")
    func uploadsBeforeDownloads() async throws {
        let remote = InMemoryRemoteStorage()
        let device = try QueueHarness(watch: true, remote: remote) { $0.maxConcurrentTransfers = 1 }
        for index in 0..<3 {
            await remote.setFile(testBytes(100, seed: UInt8(index + 1)), named: "d\(index).jpg")
            try await device.addChecklist("c\(index)", photo: "d\(index)")
        }
        await remote.hold()
        try await device.queue.startSync()
        try await withDeadline("the first download in flight") { await remote.waitForInFlight(count: 1) }
        let photo = try await device.queue.saveFile(data: testBytes(50), mediaType: nil, fileExtension: "jpg") {
            tx, attachment in
            _ = try tx.execute(
                sql: "INSERT INTO checklists (id, photo_id) VALUES ('mine', ?)", arguments: [attachment.id])
        }
        await remote.release()
        try await device.waitForState(photo.id, .synced)
        for index in 0..<3 { try await device.waitForState("d\(index)", .synced) }
        let order = await remote.callLog.map(\.operation)
        #expect(order.prefix(2) == [.download, .upload], "\(order)")
    }

    @Test("a download asked for takes a slot by pausing a background download, which resumes after")
    func askedDownloadPausesBackground() async throws {
        let remote = InMemoryRemoteStorage()
        let device = try QueueHarness(watch: true, remote: remote) {
            $0.maxConcurrentTransfers = 1
            $0.downloadPolicy = .custom { $0.id == "wanted" ? .onDemand : .eager }
        }
        let big = testBytes(5000, seed: 3)
        await remote.setFile(big, named: "big.jpg")
        await remote.setFile(testBytes(300, seed: 4), named: "wanted.jpg")
        await remote.holdDownloads(atByte: 2000)
        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: "big")
        try await withDeadline("the big download to stop at byte 2000") { await remote.waitForHeldDownload() }
        try await device.addChecklist("c2", photo: "wanted")
        try await device.waitForRecord("wanted")

        let wanted = try await device.queue.download(attachmentId: "wanted")
        #expect(wanted.localUri != nil)
        #expect(try await device.state(of: "big") == .queuedDownload)
        await remote.release()
        try await device.waitForState("big", .synced)
        #expect(device.bytesOnDisk("big.jpg") == big)
        // The held background download was paused (its call ended and a second one resumed it), not left
        // running beside the one asked for, and its first 2,000 bytes were not fetched twice.
        let bigCalls = await remote.callLog.filter { $0.filename == "big.jpg" && $0.operation == .download }
        #expect(bigCalls.count == 2)
        #expect(await remote.bytesServed == 5000 + 300)
    }
}
