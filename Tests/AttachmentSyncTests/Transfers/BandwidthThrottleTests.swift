import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// The bandwidth cap: the token bucket on a manual clock, and a queue's transfers held to it.
@Suite("Bandwidth cap", .cleansUp)
struct BandwidthThrottleTests {
    @Test("a take waits exactly what its bytes cost beyond the burst, on the injected clock")
    func takesWaitTheirCost() async throws {
        let clock = ManualClock()
        let throttle = BandwidthThrottle(bytesPerSecond: 1000, clock: clock)
        #expect(throttle.burstBytes == 100)
        // The burst goes at once.
        try await throttle.take(100)
        #expect(clock.sleeperCount == 0)
        // 1,000 more bytes cost a second, beyond the 0.1 s of burst already used.
        let taker = Task { try await throttle.take(1000) }
        await clock.waitForSleepers(count: 1)
        await clock.advance(by: .milliseconds(999))
        #expect(clock.sleeperCount == 1, "still waiting at 0.999 s")
        await clock.advance(by: .milliseconds(1))
        try await taker.value
        #expect(clock.sleeperCount == 0)
    }

    @Test("concurrent takers share the rate: the second waits for the first's bytes too")
    func concurrentTakersShareTheRate() async throws {
        let clock = ManualClock()
        let throttle = BandwidthThrottle(bytesPerSecond: 1000, clock: clock)
        let first = Task { try await throttle.take(1000) }
        await clock.waitForSleepers(count: 1)
        let second = Task { try await throttle.take(1000) }
        await clock.waitForSleepers(count: 2)
        await clock.advance(by: .milliseconds(900))
        try await first.value
        #expect(clock.sleeperCount == 1)
        await clock.advance(by: .milliseconds(999))
        #expect(clock.sleeperCount == 1, "the second is due at 1.9 s")
        await clock.advance(by: .milliseconds(1))
        try await second.value
    }

    @Test("a cancelled take stops waiting at once")
    func cancelledTakeStops() async throws {
        let clock = ManualClock()
        let throttle = BandwidthThrottle(bytesPerSecond: 10, clock: clock)
        let taker = Task { try await throttle.take(1_000_000) }
        await clock.waitForSleepers(count: 1)
        taker.cancel()
        await #expect(throws: CancellationError.self) { try await taker.value }
    }

    @Test("a cap below 1 byte per second is refused, naming the option")
    func invalidCapIsRefused() throws {
        let error = #expect(throws: AttachmentError.self) {
            try BandwidthLimit(uploadBytesPerSecond: 10, downloadBytesPerSecond: 0).validate()
        }
        #expect(error?.code == .invalidConfiguration)
        #expect(error?.name == "bandwidthLimit.downloadBytesPerSecond")
        // Binary units, as --bwlimit takes them: a 512 KiB/s cap reads as 512 KiB/s, not 524 kB/s.
        #expect(BandwidthLimit.both(1_572_864).description == "up 1.5 MiB/s, down 1.5 MiB/s")
        #expect(BandwidthLimit(downloadBytesPerSecond: 512 * 1024).description == "up unlimited, down 512 KiB/s")
        #expect(BandwidthLimit(uploadBytesPerSecond: 1 << 20).description == "up 1 MiB/s, down unlimited")
        #expect(BandwidthLimit(uploadBytesPerSecond: 1_023).description == "up 1023 B/s, down unlimited")
    }

    /// Advances `clock` by `step` each time something sleeps on it, until `work` has ended; returns the
    /// clock's time then.
    static func drive(_ clock: ManualClock, step: Duration, until work: Task<Void, any Error>) async throws -> Duration
    {
        // Whether `work` has ended, and the wait for a sleeper in progress, which its end cancels.
        let state = LockedValue<(done: Bool, waiting: Task<Void, Never>?)>((false, nil))
        let watcher = Task {
            _ = try? await work.value
            let waiting = state.withLock { state -> Task<Void, Never>? in
                state.done = true
                return state.waiting
            }
            waiting?.cancel()
        }
        for _ in 0..<100_000 {
            let waiting = Task { await clock.waitForSleepers(count: 1) }
            let done = state.withLock { state -> Bool in
                state.waiting = waiting
                return state.done
            }
            if done { waiting.cancel() }
            await waiting.value
            if state.withLock({ $0.done }) { break }
            await clock.advance(by: step)
        }
        await watcher.value
        try await work.value
        return clock.now.offset
    }

    @Test("uploads of 60,000 bytes under a 10,000 B/s cap take 5.9 s of the queue's clock, downloads likewise")
    func queueTransfersKeepToTheCap() async throws {
        let remote = InMemoryRemoteStorage()
        let device = try QueueHarness(watch: true, remote: remote) {
            $0.bandwidthLimit = BandwidthLimit(uploadBytesPerSecond: 10_000, downloadBytesPerSecond: 20_000)
        }
        try await device.queue.startSync()
        for index in 0..<3 {
            _ = try await device.queue.saveFile(
                data: testBytes(20_000, seed: UInt8(index + 1)), mediaType: nil, fileExtension: "jpg")
        }
        let uploads = Task { try await device.queue.syncNow() }
        let uploaded = try await Self.drive(device.clock, step: .milliseconds(10), until: uploads)
        #expect(await remote.files.count == 3)
        // 60,000 bytes at 10,000 B/s, less the 0.1 s burst: 5.9 s, give or take one step.
        #expect(uploaded >= .milliseconds(5_890) && uploaded <= .milliseconds(5_910), "\(uploaded)")
        let status = try await withDeadline("a status") { await device.queue.status.first { _ in true } }
        #expect(status?.bandwidthLimit?.uploadBytesPerSecond == 10_000)

        // Downloads: 40,000 bytes another device uploaded, at 20,000 B/s.
        for index in 0..<2 {
            await remote.setFile(testBytes(20_000, seed: UInt8(10 + index)), named: "remote-\(index).jpg")
            _ = try await device.db.execute(
                sql: "INSERT INTO checklists (id, photo_id) VALUES (?, ?)",
                parameters: ["c\(index)", "remote-\(index)"])
        }
        let start = device.clock.now.offset
        let downloads = Task {
            try await device.waitForState("remote-0", .synced)
            try await device.waitForState("remote-1", .synced)
        }
        let downloaded = try await Self.drive(device.clock, step: .milliseconds(10), until: downloads) - start
        #expect(device.bytesOnDisk("remote-1.jpg") == testBytes(20_000, seed: 11))
        #expect(downloaded >= .milliseconds(1_890) && downloaded <= .milliseconds(1_910), "\(downloaded)")
    }
}
