import AttachmentSyncTesting
import Foundation
import Testing

@testable import AttachmentSync

@Suite("Sync triggers", .cleansUp)
struct TriggerTests {
    @Test("a change to the attachments table starts the upload without syncNow")
    func tableChangeTriggers() async throws {
        let device = try QueueHarness()
        try await device.queue.startSync()
        let saved = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        try await device.waitForState(saved.id, .synced)
        #expect(try await device.memoryRemote.file(named: saved.filename) == testBytes(10))
    }

    @Test("a watched stream that fails is made anew after 1 s, then 2 s, and its rows then reconciled")
    func failedWatchIsRemade() async throws {
        struct Broken: Error {}
        let calls = LockedValue(0)
        let watch = CustomWatch { db in
            let real = QueueHarness.watchPhotos(db)
            return {
                let call = calls.withLock { count in
                    count += 1
                    return count
                }
                guard call > 2 else { return AsyncThrowingStream { $0.finish(throwing: Broken()) } }
                return try real()
            }
        }
        let device = try QueueHarness(customWatch: watch)
        try await device.db.execute(
            sql: "INSERT INTO checklists (id, description, photo_id) VALUES ('c1', 'c', 'p1')", parameters: [])
        try await device.queue.startSync()
        await device.clock.waitForSleepers(count: 1)
        #expect(calls.withLock { $0 } == 1)
        await device.clock.advance(by: .seconds(1))
        await device.clock.waitForSleepers(count: 1)
        #expect(calls.withLock { $0 } == 2, "remade after 1 s")
        await device.clock.advance(by: .seconds(1))
        #expect(calls.withLock { $0 } == 2, "the second pause is 2 s")
        await device.clock.advance(by: .seconds(1))
        try await waitUntil("the stream to be made a third time") { calls.withLock { $0 } == 3 }
        try await waitUntil("the watched photo to get a record") {
            (try? await device.queue.attachment(id: "p1")) != nil
        }
    }

    @Test("changes within the throttle window wait for it and are handled in one pass")
    func throttled() async throws {
        let device = try QueueHarness { $0.syncThrottleDuration = .seconds(10) }
        let remote = try device.memoryRemote
        try await device.queue.startSync()
        // The startup pass ran (nothing to do); the loop now pauses for the throttle.
        await device.clock.waitForSleepers(count: 1)

        var ids: [String] = []
        for n in 0..<3 {
            ids.append(
                try await device.queue.saveFile(
                    data: testBytes(10, seed: UInt8(n)), mediaType: nil, fileExtension: "jpg"
                ).id)
        }
        #expect(await remote.uploadCount == 0, "no pass may run inside the throttle window")

        await device.clock.advance(by: .seconds(10))
        for id in ids { try await device.waitForState(id, .synced) }
        #expect(await remote.uploadCount == 3)
    }

    @Test("the periodic pass retries a failed upload once per interval, never in a loop")
    func periodicRetry() async throws {
        let device = try QueueHarness { $0.syncInterval = .seconds(30) }
        let remote = try device.memoryRemote
        await remote.setAlwaysFailing(.upload, with: InMemoryRemoteStorage.offlineError)
        let saved = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        try await device.queue.startSync()
        try await waitFor("the startup attempt") { await remote.waitForCalls(.upload, count: 1) }
        await device.queue.waitUntilIdle()
        #expect(await remote.uploadCount == 1, "a failure waits for the next trigger")

        for attempt in 2...3 {
            await device.clock.waitForSleepers(count: 1)
            await device.clock.advance(by: .seconds(30))
            try await waitFor("periodic attempt \(attempt)") { await remote.waitForCalls(.upload, count: attempt) }
            await device.queue.waitUntilIdle()
            #expect(await remote.uploadCount == attempt)
        }

        await remote.setAlwaysFailing(.upload, with: nil)
        await device.clock.waitForSleepers(count: 1)
        await device.clock.advance(by: .seconds(30))
        try await device.waitForState(saved.id, .synced)
        #expect(await remote.uploadCount == 4)
    }

    @Test("syncInterval 0 disables the periodic pass: no timer waits on the clock")
    func zeroIntervalDisablesPeriodicSync() async throws {
        let device = try QueueHarness { $0.syncInterval = .zero }
        let remote = try device.memoryRemote
        await remote.setAlwaysFailing(.upload, with: InMemoryRemoteStorage.offlineError)
        _ = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        try await device.queue.startSync()
        try await waitFor("the startup attempt") { await remote.waitForCalls(.upload, count: 1) }
        await device.queue.waitUntilIdle()
        #expect(device.clock.sleeperCount == 0)
        await device.clock.advance(by: .seconds(3600))
        await device.queue.waitUntilIdle()
        #expect(await remote.uploadCount == 1)
        try await device.queue.syncNow()
        #expect(await remote.uploadCount == 2, "syncNow is a trigger: it retries exactly once")
    }

    @Test("the seed-style TimeInterval 0 maps to a disabled interval")
    func seedZeroInterval() throws {
        let folder = try TemporaryDirectory()
        let db = try LocalDatabase(path: folder.path("db.sqlite"), schema: QueueHarness.schema)
        let queue = AttachmentQueue(
            db: db, attachmentsDirectory: folder.path("files"), remoteStorage: InMemoryRemoteStorage(), syncInterval: 0)
        #expect(queue.configuration.syncInterval == .zero)
        #expect(queue.configuration.syncThrottleDuration == .seconds(1))
        #expect(queue.configuration.archivedCacheLimit == 100)
    }

    @Test("syncNow works without startSync")
    func syncNowAlone() async throws {
        let device = try QueueHarness()
        let saved = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        try await device.queue.syncNow()
        #expect(try await device.state(of: saved.id) == .synced)
    }

    @Test("transfers of one attachment never run twice at once, however often sync is triggered")
    func oneTransferPerAttachment() async throws {
        let device = try QueueHarness()
        let remote = try device.memoryRemote
        let saved = try await device.startStuckUpload()
        let sync = Task { try await device.queue.syncNow() }
        for n in 0..<5 {
            try await device.addChecklist("noise\(n)", photo: nil)
        }
        #expect(await remote.callLog.filter { $0.filename == saved.filename }.count == 1)
        await remote.release()
        try await sync.value
        #expect(try await device.state(of: saved.id) == .synced)
        #expect(await remote.callLog.filter { $0.filename == saved.filename }.count == 1)
        #expect(await remote.maxConcurrentCalls == 1)
    }
}
