import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// Fewer transfers at once while the remote refuses as overloaded, and back up when it answers again.
@Suite("Adaptive concurrency", .cleansUp)
struct AdaptiveConcurrencyTests {
    @Test("the policy halves once per generation, never below 1, and grows back by about one per limit answers")
    func policy() {
        var policy = AdaptiveConcurrency(maximum: 16)
        #expect(policy.current == 16)
        let first = policy.generation
        policy.refused(startedIn: first)
        policy.refused(startedIn: first)
        policy.refused(startedIn: first)
        #expect(policy.current == 8, "refusals of transfers started under the old limit halve it once")
        policy.refused(startedIn: policy.generation)
        #expect(policy.current == 4)
        for _ in 0..<10 { policy.refused(startedIn: policy.generation) }
        #expect(policy.current == 1)
        for _ in 0..<3 { policy.answered() }
        #expect(policy.current == 2, "1 → 2 → 2.5 → 2.9")
        policy.answered()
        #expect(policy.current == 3, "2.9 + 1/2.9")
        for _ in 0..<1_000 { policy.answered() }
        #expect(policy.current == 16, "back to the maximum, never above")

        var off = AdaptiveConcurrency(maximum: 16, isEnabled: false)
        off.refused(startedIn: off.generation)
        #expect(off.current == 16)
    }

    @Test("only overload slows the queue: a Retry-After or an overload signal, not an offline device")
    func whatCountsAsOverload() {
        #expect(AdaptiveConcurrency.isOverload(InMemoryRemoteStorage.overloadedError))
        var withRetryAfter = AttachmentError(code: .remoteUnavailable, message: "busy")
        withRetryAfter.retryAfter = .seconds(2)
        #expect(AdaptiveConcurrency.isOverload(withRetryAfter))
        #expect(
            !AdaptiveConcurrency.isOverload(AttachmentError(code: .remoteUnavailable, message: "connection refused")))
        #expect(!AdaptiveConcurrency.isOverload(InMemoryRemoteStorage.offlineError))
        #expect(!AdaptiveConcurrency.isOverload(AttachmentError(code: .remoteNotFound, message: "missing")))
    }

    /// The state machine against a simulated remote that serves `limit` calls at once and refuses a call
    /// that starts while `limit` are in flight; time moves in ticks, each finishing every call in flight in
    /// the order they started. Returns the refusals, the ticks, and the most calls in flight in the last
    /// quarter of the ticks.
    static func simulate(adaptive: Bool, count: Int, limit: Int) throws -> (refused: Int, ticks: Int, lateMax: Int) {
        var machine = QueueStateMachine<Int, Int>(maxConcurrentTransfers: 16, adaptive: adaptive)
        machine.syncStarted()
        var pending = (0..<count).map { "f\($0)" }
        var inFlight: [(id: String, refused: Bool)] = []
        var refused = 0
        var inFlightPerTick: [Int] = []
        func start(_ read: QueueStateMachine<Int, Int>.Read?) {
            guard let read else { return }
            let busy = Set(inFlight.map(\.id))
            let records = pending.filter { !busy.contains($0) }.map {
                AttachmentRecord(
                    id: $0, filename: "\($0).bin", state: .queuedUpload, timestamp: 1, localPath: "\($0).bin")
            }
            let outcome = machine.recordsRead(read, records: records, earliestRetry: nil, now: 0)
            for record in outcome.start {
                machine.started(record.id, handle: 0)
                inFlight.append((record.id, inFlight.count >= limit))
            }
            start(outcome.read)
        }
        var ticks = 0
        while !pending.isEmpty, ticks < 10_000 {
            ticks += 1
            if inFlight.isEmpty {
                machine.passStarted()  // the next trigger: refused ones may go again
                start(machine.readQueued().read)
            }
            inFlightPerTick.append(inFlight.count)
            let finishing = inFlight
            inFlight = []
            for call in finishing {
                if call.refused {
                    refused += 1
                } else {
                    pending.removeAll { $0 == call.id }
                }
                let outcome = machine.transferFinished(call.id, state: .queuedUpload, call.refused ? .refused : .done)
                start(outcome.read)
            }
        }
        let late = inFlightPerTick.suffix(max(1, inFlightPerTick.count / 4))
        return (refused, ticks, late.max() ?? 0)
    }

    @Test("simulated: against a remote serving 4 at once, the machine converges near 4 and is refused far less")
    func simulatedThrottling() throws {
        let plain = try Self.simulate(adaptive: false, count: 400, limit: 4)
        let adaptive = try Self.simulate(adaptive: true, count: 400, limit: 4)
        print(
            "simulated 400 uploads, remote serving 4: refused \(plain.refused) in \(plain.ticks) ticks with 16 at "
                + "once, \(adaptive.refused) in \(adaptive.ticks) ticks adapting")
        #expect(plain.ticks < 10_000 && adaptive.ticks < 10_000, "both finish")
        #expect(plain.lateMax == 16, "without adapting it keeps starting 16")
        #expect(adaptive.lateMax <= 6, "adapting, it runs about 4 at once: \(adaptive.lateMax)")
        #expect(adaptive.refused * 5 < plain.refused, "refused: \(adaptive.refused) adapting, \(plain.refused) not")
    }

    @Test("status says how far the queue has slowed down, and nothing once it is back to the maximum")
    func statusShowsThrottling() async throws {
        let remote = InMemoryRemoteStorage()
        await remote.throttle(above: 2)
        let device = try QueueHarness(remote: remote) { $0.maxConcurrentTransfers = 8 }
        for index in 0..<8 {
            _ = try await device.queue.saveFile(data: testBytes(50 + index), mediaType: nil, fileExtension: "bin")
        }
        #expect(try #require(await device.queue.status.first { _ in true }).throttledConcurrency == nil)
        // All eight calls begin before any ends (the remote holds them): six are refused, from one
        // generation, so the limit halves once.
        await remote.hold()
        let round = Task { try await device.queue.syncNow() }
        await remote.waitForCalls(.upload, count: 8)
        await remote.release()
        try await round.value
        #expect(await remote.refusedCount == 6)
        let status = try await withDeadline("a status with the lowered limit") {
            await device.queue.status.first { $0.throttledConcurrency != nil }
        }
        #expect(status?.throttledConcurrency == 4)
        await remote.throttle(above: nil)
        for _ in 0..<10 where try await device.queue.allAttachments().contains(where: { $0.state != .synced }) {
            try await device.queue.syncNow()
        }
        #expect(try await device.queue.allAttachments().allSatisfy { $0.state == .synced })
        await device.queue.close()
    }

    /// What a queue running up to 16 transfers at once does with a remote that refuses a call that starts while
    /// 4 are in flight: 16 files in a first pass, then 24 more and a second pass, then passes until everything
    /// is uploaded (which it checks). The first two passes begin with the remote held, so every call a pass
    /// starts is in flight before any ends, and the remote refuses exactly the calls beyond the fourth,
    /// whatever the scheduling: no latency, no wall clock.
    ///
    /// Returns the limit the queue reported after the first pass's refusals (`throttledConcurrency`), how many
    /// calls its second pass had in flight at once, and the calls refused by then.
    static func throttledRun(adaptive: Bool) async throws -> (lowered: Int?, secondWave: Int, refused: Int) {
        let remote = InMemoryRemoteStorage()
        await remote.throttle(above: 4)
        let device = try QueueHarness(remote: remote) {
            $0.maxConcurrentTransfers = 16
            $0.adaptiveConcurrency = adaptive
        }
        func save(_ numbers: Range<Int>) async throws {
            for index in numbers {
                _ = try await device.queue.saveFile(data: testBytes(100 + index), mediaType: nil, fileExtension: "bin")
            }
        }
        // First pass: all 16 files start at once; 12 are refused, 4 uploaded, and none is left to start.
        await remote.hold()
        try await save(0..<16)
        let first = Task { try await device.queue.syncNow() }
        try await withDeadline("16 uploads in flight") { await remote.waitForInFlight(count: 16) }
        await remote.release()
        try await first.value
        #expect(await remote.refusedCount == 12, "the first pass: 16 at once, 4 served")
        let status =
            adaptive
            ? try await withDeadline("the lowered limit in the status") {
                await device.queue.status.first { $0.throttledConcurrency != nil }
            }
            : await device.queue.status.first { _ in true }
        let lowered = status?.throttledConcurrency

        // Second pass, 36 waiting: the queue starts as many as its limit allows, none ends while held, and
        // it starts no more (the limit is reached and nothing finishes).
        await remote.hold()
        try await save(16..<40)
        let second = Task { try await device.queue.syncNow() }
        try await withDeadline("the second pass's uploads in flight") {
            await remote.waitForInFlight(count: lowered ?? 16)
        }
        let secondWave = await remote.inFlightCount
        let refused = await remote.refusedCount
        await remote.release()
        try await second.value

        for _ in 0..<200 where try await device.queue.allAttachments().contains(where: { $0.state != .synced }) {
            try await device.queue.syncNow()
        }
        #expect(try await device.queue.allAttachments().allSatisfy { $0.state == .synced }, "all uploaded")
        #expect(await remote.files.count == 40)
        await device.queue.close()
        return (lowered, secondWave, refused)
    }

    @Test("a remote that refuses above 4 calls: adapting, the queue halves its calls at once and is refused less")
    func throttledRemote() async throws {
        let plain = try await Self.throttledRun(adaptive: false)
        let adaptive = try await Self.throttledRun(adaptive: true)
        #expect(plain.lowered == nil && plain.secondWave == 16, "without adapting it starts 16 again")
        #expect(adaptive.lowered == 8 && adaptive.secondWave == 8, "12 refusals of one generation halve 16 once")
        // 12 in the first pass either way; then 16 - 4 without adapting, 8 - 4 adapting.
        #expect(plain.refused == 24)
        #expect(adaptive.refused == 16)
    }
}
