import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

@Suite("One time source", .cleansUp)
struct WallClockTests {
    @Test("the derived wall clock moves exactly with the injected clock")
    func followsClock() async {
        let clock = ManualClock()
        let wall = WallClock(following: clock)
        let start = wall.milliseconds()
        await clock.advance(by: .seconds(90))
        #expect(wall.milliseconds() - start == 90_000)
        let timestamps = MonotonicTimestamps(wallClock: wall)
        let first = timestamps.next()
        #expect(timestamps.next() == first + 1, "never repeats within a millisecond")
        await clock.advance(by: .seconds(1))
        #expect(timestamps.next() >= first + 1_000)
    }

    @Test("with only a manual clock set, stored retry times follow it: the retry runs when the clock gets there")
    func retryTimesFollowTheClock() async throws {
        let device = try QueueHarness {
            $0.dateOverride = nil  // the harness pins dates to the manual clock; here the queue derives them
            $0.retryBackoff = RetryBackoff(initialDelay: .seconds(10), maximumDelay: .seconds(60), jitter: false)
        }
        let remote = try device.memoryRemote
        await remote.failNext(.upload, count: 1, with: InjectedFailure("server busy"))
        let saved = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        try await device.queue.syncNow()
        try await device.queue.syncNow()
        #expect(await remote.uploadCount == 1, "not before its retry time")
        await device.clock.advance(by: .seconds(10))
        try await device.queue.syncNow()
        #expect(await remote.uploadCount == 2, "10 s of the injected clock are 10 s of stored time")
        #expect(try await device.state(of: saved.id) == .synced)
    }
}
