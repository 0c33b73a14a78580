import AttachmentSyncTesting
import Testing

/// Every wait in these tests is for a condition (a task's value, a sleeper count); none sleeps on the wall
/// clock. The time limit is a backstop for waits that return when cancelled; it cannot interrupt a test stuck
/// awaiting an unstructured task that never finishes (Swift Testing waits for the test), so a lost wake-up
/// shows as a hung run.
///
/// The tests run on threads of their own (``OwnThreads``): each is a long chain of scheduler hops (an advance
/// yields 10 times), and on the shared cooperative pool every hop waits behind the whole run's queue, so
/// their time limits measured the load of the run rather than these tests. Their tasks start with
/// `Task.onOwnThreads` for the same reason.
@Suite(.timeLimit(.minutes(1)), .onOwnThreads)
struct ManualClockTests {
    private func seconds(_ value: Int) -> ManualClock.Instant {
        ManualClock.Instant.zero.advanced(by: .seconds(value))
    }

    @Test func instantArithmetic() {
        let start = ManualClock.Instant.zero
        let later = start.advanced(by: .seconds(5))

        #expect(later.offset == .seconds(5))
        #expect(start.duration(to: later) == .seconds(5))
        #expect(later.duration(to: start) == .seconds(-5))
        #expect(start < later)
        #expect(start + .seconds(5) == later)
        #expect(later - start == .seconds(5))
        #expect(later - .seconds(5) == start)
        #expect(ManualClock().now == .zero)
        #expect(ManualClock().minimumResolution == .zero)
    }

    @Test func sleepReturnsOnlyOnceTheClockIsAdvancedToTheDeadline() async throws {
        // Given a task sleeping for 5 s
        let clock = ManualClock()
        let sleeper = Task.onOwnThreads {
            try await clock.sleep(for: .seconds(5))
            return clock.now
        }
        await clock.waitForSleepers(count: 1)

        // When the clock moves 4 s, then it still sleeps
        await clock.advance(by: .seconds(4))
        #expect(clock.sleeperCount == 1)
        #expect(clock.now == seconds(4))

        // When the clock reaches the deadline, then it wakes and sees the new time
        await clock.advance(by: .seconds(1))
        #expect(clock.sleeperCount == 0)
        #expect(try await sleeper.value == seconds(5))
    }

    @Test func sleepUntilAReachedDeadlineReturnsAtOnce() async throws {
        // Given a clock at 10 s
        let clock = ManualClock()
        await clock.advance(to: seconds(10))

        // When sleeping until earlier or current instants, or for nothing, then nothing waits
        try await clock.sleep(until: seconds(3))
        try await clock.sleep(until: clock.now)
        try await clock.sleep(for: .zero)
        #expect(clock.sleeperCount == 0)
    }

    @Test func sleepersWakeInDeadlineOrderNotInTheOrderTheyStarted() async throws {
        // Given sleepers started in the order 3 s, 1 s, 2 s
        let clock = ManualClock()
        let woke = Recorder<Int>()
        func sleeper(_ delay: Int) -> Task<Void, any Error> {
            Task.onOwnThreads {
                try await clock.sleep(for: .seconds(delay))
                await woke.append(delay)
            }
        }
        let three = sleeper(3)
        await clock.waitForSleepers(count: 1)
        let one = sleeper(1)
        await clock.waitForSleepers(count: 2)
        let two = sleeper(2)
        await clock.waitForSleepers(count: 3)

        // When the clock moves one second at a time, then exactly one sleeper wakes each time, earliest first
        await clock.advance(by: .seconds(1))
        try await one.value
        #expect(await woke.values == [1])
        #expect(clock.sleeperCount == 2)

        await clock.advance(by: .seconds(1))
        try await two.value
        #expect(await woke.values == [1, 2])
        #expect(clock.sleeperCount == 1)

        await clock.advance(by: .seconds(1))
        try await three.value
        #expect(await woke.values == [1, 2, 3])
        #expect(clock.sleeperCount == 0)
    }

    @Test func oneAdvanceWakesEveryDueSleeperAtTheNewTimeAndNoOther() async throws {
        // Given sleepers until 1, 2, 3 and 10 s
        let clock = ManualClock()
        let sleepers = [1, 2, 3, 10].map { deadline in
            Task.onOwnThreads {
                try await clock.sleep(until: seconds(deadline))
                return clock.now
            }
        }
        await clock.waitForSleepers(count: 4)

        // When the clock jumps to 5 s
        await clock.advance(to: seconds(5))

        // Then the three due sleepers wake, all seeing 5 s, and the last one still sleeps
        #expect(clock.sleeperCount == 1)
        for sleeper in sleepers.prefix(3) {
            #expect(try await sleeper.value == seconds(5))
        }
        await clock.advance(to: seconds(10))
        #expect(try await sleepers[3].value == seconds(10))
    }

    @Test func advancingToAnEarlierInstantLeavesTheClockUnchanged() async {
        let clock = ManualClock()
        await clock.advance(by: .seconds(5))
        await clock.advance(to: seconds(2))
        await clock.advance(by: .zero)
        #expect(clock.now == seconds(5))
    }

    @Test func cancellingASleeperThrowsCancellationErrorWithoutAnAdvance() async {
        // Given a task sleeping for a minute
        let clock = ManualClock()
        let sleeper = Task.onOwnThreads { try await clock.sleep(for: .seconds(60)) }
        await clock.waitForSleepers(count: 1)

        // When it is cancelled
        sleeper.cancel()

        // Then it throws at once, and no longer counts as a sleeper
        await #expect(throws: CancellationError.self) { try await sleeper.value }
        #expect(clock.sleeperCount == 0)
        #expect(clock.now == .zero)
    }

    @Test func sleepingInAnAlreadyCancelledTaskThrows() async {
        let clock = ManualClock()
        let sleeper = Task.onOwnThreads {
            withUnsafeCurrentTask { $0?.cancel() }
            try await clock.sleep(for: .seconds(60))
        }
        await #expect(throws: CancellationError.self) { try await sleeper.value }
        #expect(clock.sleeperCount == 0)
    }

    @Test func cancellationRacingWithTheStartOfSleepNeverLosesAWakeUp() async {
        // Given many tasks cancelled before, while and after they enter `sleep` (the clock never moves, so
        // only cancellation can end them: a lost wake-up would hang the run)
        let clock = ManualClock()
        let sleepers = (0..<500).map { index in
            Task.onOwnThreads {
                for _ in 0..<(index % 7) {
                    await Task.yield()
                }
                try await clock.sleep(for: .seconds(60))
            }
        }
        for (index, sleeper) in sleepers.enumerated() {
            if index.isMultiple(of: 3) {
                await Task.yield()
            }
            sleeper.cancel()
        }

        // Then every one of them throws CancellationError
        for sleeper in sleepers {
            await #expect(throws: CancellationError.self) { try await sleeper.value }
        }
        #expect(clock.sleeperCount == 0)
    }

    @Test func advanceRacingWithTheStartOfSleepNeverLosesAWakeUp() async throws {
        // Given many tasks entering `sleep(until: 1 s)` while the clock is advanced past it
        let clock = ManualClock()
        let sleepers = (0..<500).map { index in
            Task.onOwnThreads {
                for _ in 0..<(index % 7) {
                    await Task.yield()
                }
                try await clock.sleep(until: seconds(1))
            }
        }
        await Task.yield()
        await clock.advance(to: seconds(1))

        // Then every one of them returns, whether it got in before or after the advance
        for sleeper in sleepers {
            try await sleeper.value
        }
        #expect(clock.sleeperCount == 0)
    }

    @Test func waitForSleepersReturnsOnceEnoughTasksSleep() async throws {
        // Given a waiter for two sleepers, started before any sleeper
        let clock = ManualClock()
        await clock.waitForSleepers(count: 0)
        let waiter = Task.onOwnThreads {
            await clock.waitForSleepers(count: 2)
            return clock.sleeperCount
        }

        // When two tasks go to sleep
        let first = Task.onOwnThreads { try await clock.sleep(for: .seconds(1)) }
        let second = Task.onOwnThreads { try await clock.sleep(for: .seconds(2)) }

        // Then the waiter returns, having seen both asleep
        #expect(await waiter.value == 2)
        #expect(clock.sleeperCount == 2)
        await clock.advance(by: .seconds(2))
        try await first.value
        try await second.value
    }

    @Test func waitForSleepersAfterAnAdvanceWaitsForALoopToSleepAgain() async throws {
        // Given a loop that ticks every 30 s, three times
        let clock = ManualClock()
        let ticks = Recorder<Int>()
        let loop = Task.onOwnThreads {
            for tick in 1...3 {
                try await clock.sleep(for: .seconds(30))
                await ticks.append(tick)
            }
        }

        // When the test drives it one period at a time
        for _ in 1...3 {
            await clock.waitForSleepers(count: 1)
            await clock.advance(by: .seconds(30))
        }

        // Then it ticks once per period
        try await loop.value
        #expect(await ticks.values == [1, 2, 3])
        #expect(clock.now == seconds(90))
    }

    @Test func cancellingAWaitForSleepersReturnsEarly() async {
        let clock = ManualClock()
        let waiter = Task.onOwnThreads { await clock.waitForSleepers(count: 5) }
        waiter.cancel()
        await waiter.value
        #expect(clock.sleeperCount == 0)
    }

    @Test func worksAsAnyClockOfDuration() async throws {
        // Given the clock stored the way the library stores clocks
        let manual = ManualClock()
        let clock: any Clock<Duration> = manual
        let sleeper = Task.onOwnThreads { try await clock.sleep(for: .seconds(2)) }
        let taskSleeper = Task.onOwnThreads {
            try await Task.sleep(until: manual.now.advanced(by: .seconds(3)), clock: manual)
        }
        await manual.waitForSleepers(count: 2)

        // When the clock reaches the first deadline, then only the first sleeper wakes
        await manual.advance(by: .seconds(2))
        try await sleeper.value
        #expect(manual.sleeperCount == 1)

        // When it reaches the second, then `Task.sleep(until:clock:)` wakes too
        await manual.advance(by: .seconds(1))
        try await taskSleeper.value
        #expect(clock.minimumResolution == .zero)
    }

    @Test("advancing by a negative duration does nothing")
    func negativeAdvanceIsIgnored() async {
        let clock = ManualClock()
        await clock.advance(by: .seconds(5))
        await clock.advance(by: .seconds(-3))
        #expect(clock.now == ManualClock.Instant(offset: .seconds(5)))
    }
}

/// Collects values from concurrent tasks, in the order they arrive.
actor Recorder<Value: Sendable> {
    private(set) var values: [Value] = []

    func append(_ value: Value) {
        values.append(value)
    }

}
