import AttachmentSync
import Foundation

/// A clock whose time moves only when a test says so.
///
/// Inject it wherever the code under test takes an `any Clock<Duration>` (retry back-off, periodic sync,
/// adapter latency). Nothing that sleeps on it wakes up until the test calls ``advance(by:)`` or
/// ``advance(to:)``, so a test decides exactly when every timer fires and never waits on the wall clock.
///
/// To know that a background loop has reached its sleep (and so that advancing now will wake it), wait
/// for it with ``waitForSleepers(count:)`` instead of guessing:
///
/// ```swift
/// let clock = ManualClock()
/// let poller = Task {
///     try await clock.sleep(for: .seconds(30))
///     return "woke"
/// }
/// await clock.waitForSleepers(count: 1)  // the task is now suspended in `sleep`
/// await clock.advance(by: .seconds(30))  // its deadline is reached: it is resumed
/// #expect(try await poller.value == "woke")
/// ```
///
/// Time starts at ``Instant/zero`` and never moves backwards. All methods are safe to call from any task.
public final class ManualClock: Clock, Sendable {
    /// The clock measures time in `Swift.Duration`, like `ContinuousClock`, so it can stand in for an
    /// `any Clock<Duration>`.
    public typealias Duration = Swift.Duration

    /// A point in a ``ManualClock``'s time: how far the clock had been advanced from its start.
    ///
    /// ```swift
    /// let clock = ManualClock()
    /// let deadline = clock.now.advanced(by: .seconds(5))
    /// #expect(deadline.offset == .seconds(5))
    /// #expect(clock.now.duration(to: deadline) == .seconds(5))
    /// ```
    public struct Instant: InstantProtocol {
        /// The instant at which every ``ManualClock`` starts: an ``offset`` of zero.
        ///
        /// ```swift
        /// #expect(ManualClock().now == .zero)
        /// ```
        public static let zero = Instant(offset: .zero)

        /// The time elapsed since the clock's start.
        public var offset: Swift.Duration

        /// Creates the instant `offset` after the clock's start.
        ///
        /// ```swift
        /// let fiveSeconds = ManualClock.Instant(offset: .seconds(5))
        /// ```
        ///
        /// - Parameter offset: The time elapsed since the clock's start.
        public init(offset: Swift.Duration) {
            self.offset = offset
        }

        /// Returns the instant `duration` later than this one (earlier when `duration` is negative).
        ///
        /// ```swift
        /// #expect(ManualClock.Instant.zero.advanced(by: .seconds(2)).offset == .seconds(2))
        /// ```
        ///
        /// - Parameter duration: The distance to move.
        /// - Returns: The instant `duration` away from this one.
        public func advanced(by duration: Swift.Duration) -> Instant {
            Instant(offset: offset + duration)
        }

        /// Returns the duration from this instant to `other`, negative when `other` is earlier.
        ///
        /// ```swift
        /// let start = ManualClock.Instant.zero
        /// #expect(start.duration(to: start.advanced(by: .seconds(3))) == .seconds(3))
        /// ```
        ///
        /// - Parameter other: The instant to measure to.
        /// - Returns: `other.offset - offset`.
        public func duration(to other: Instant) -> Swift.Duration {
            other.offset - offset
        }

        /// Whether `lhs` comes before `rhs`.
        ///
        /// ```swift
        /// #expect(ManualClock.Instant.zero < ManualClock.Instant(offset: .seconds(1)))
        /// ```
        ///
        /// - Parameters:
        ///   - lhs: An instant.
        ///   - rhs: Another instant.
        /// - Returns: `true` when `lhs.offset < rhs.offset`.
        public static func < (lhs: Instant, rhs: Instant) -> Bool {
            lhs.offset < rhs.offset
        }

        /// Returns the instant `rhs` later than `lhs`: the same as `lhs.advanced(by: rhs)`.
        ///
        /// ```swift
        /// let deadline = clock.now + .seconds(30)
        /// ```
        ///
        /// - Parameters:
        ///   - lhs: An instant.
        ///   - rhs: The distance to move.
        /// - Returns: The instant `rhs` away from `lhs`.
        public static func + (lhs: Instant, rhs: Swift.Duration) -> Instant {
            lhs.advanced(by: rhs)
        }

        /// Returns the instant `rhs` earlier than `lhs`: the same as `lhs.advanced(by: .zero - rhs)`.
        ///
        /// ```swift
        /// let earlier = clock.now - .seconds(1)
        /// ```
        ///
        /// - Parameters:
        ///   - lhs: An instant.
        ///   - rhs: The distance to move back.
        /// - Returns: The instant `rhs` before `lhs`.
        public static func - (lhs: Instant, rhs: Swift.Duration) -> Instant {
            lhs.advanced(by: .zero - rhs)
        }

        /// Returns the duration from `rhs` to `lhs`: the same as `rhs.duration(to: lhs)`.
        ///
        /// ```swift
        /// let elapsed = clock.now - start
        /// ```
        ///
        /// - Parameters:
        ///   - lhs: The later instant.
        ///   - rhs: The earlier instant.
        /// - Returns: `lhs.offset - rhs.offset`.
        public static func - (lhs: Instant, rhs: Instant) -> Swift.Duration {
            rhs.duration(to: lhs)
        }
    }

    /// A task suspended in ``sleep(until:tolerance:)``.
    private struct Sleeper {
        var deadline: Instant
        var continuation: CheckedContinuation<Void, any Error>
    }

    /// A task suspended in ``waitForSleepers(count:)``.
    private struct SleeperWaiter {
        var count: Int
        var continuation: CheckedContinuation<Void, Never>
    }

    private struct State {
        var now = Instant.zero
        /// Source of ids for sleepers and waiters. Ids grow with each call, so for sleepers with equal
        /// deadlines they also give the order in which the sleeps started.
        var lastID: UInt64 = 0
        var sleepers: [UInt64: Sleeper] = [:]
        var sleeperWaiters: [UInt64: SleeperWaiter] = [:]

        mutating func makeID() -> UInt64 {
            lastID += 1
            return lastID
        }

        /// Removes and returns the waiters that ``sleepers`` now satisfies.
        mutating func takeSatisfiedWaiters() -> [CheckedContinuation<Void, Never>] {
            let satisfied = sleeperWaiters.filter { $0.value.count <= sleepers.count }
            for id in satisfied.keys {
                sleeperWaiters[id] = nil
            }
            return satisfied.values.map(\.continuation)
        }
    }

    /// How many times ``advance(to:)`` yields after resuming sleepers.
    private static let yieldsAfterAdvance = 10

    private let state = LockedValue(State())

    /// Creates a clock at ``Instant/zero``, with no sleepers.
    ///
    /// ```swift
    /// let clock = ManualClock()
    /// let queue = MyPoller(clock: clock)  // any API that takes `any Clock<Duration>`
    /// ```
    public init() {}

    /// The clock's current time: ``Instant/zero`` plus everything it has been advanced by.
    ///
    /// ```swift
    /// let clock = ManualClock()
    /// await clock.advance(by: .seconds(3))
    /// #expect(clock.now == .zero.advanced(by: .seconds(3)))
    /// ```
    public var now: Instant {
        state.withLock { $0.now }
    }

    /// The calendar date this clock stands for: 2026-01-01 00:00:00 UTC plus the time advanced so far.
    ///
    /// Pass it where a component wants dates that must move with the test's time. (The attachment queue
    /// needs nothing more than `configuration.clock = clock`: its stored dates follow its clock. Setting
    /// `configuration.currentDate = { clock.date }` as well pins them to this calendar date instead.)
    public var date: Date {
        let offset = now.offset.components
        return Date(timeIntervalSince1970: 1_767_225_600 + Double(offset.seconds) + Double(offset.attoseconds) / 1e18)
    }

    /// The smallest step the clock can measure: `.zero`, since time only moves when advanced.
    ///
    /// ```swift
    /// #expect(ManualClock().minimumResolution == .zero)
    /// ```
    public var minimumResolution: Swift.Duration {
        .zero
    }

    /// How many tasks are suspended in ``sleep(until:tolerance:)`` right now.
    ///
    /// A sleeper stops counting as soon as it is resumed, by an advance or by cancellation.
    ///
    /// ```swift
    /// await clock.waitForSleepers(count: 1)
    /// await clock.advance(by: .seconds(1))  // not enough to reach the deadline
    /// #expect(clock.sleeperCount == 1)
    /// ```
    public var sleeperCount: Int {
        state.withLock { $0.sleepers.count }
    }

    /// Suspends the calling task until the clock has been advanced to `deadline` or past it.
    ///
    /// Returns at once when `deadline` is already reached. While suspended, the task counts in
    /// ``sleeperCount``. Usually called through `Clock.sleep(for:tolerance:)` or `Task.sleep(until:clock:)`.
    ///
    /// ```swift
    /// let clock = ManualClock()
    /// let sleeper = Task { try await clock.sleep(until: .zero.advanced(by: .seconds(2))) }
    /// await clock.waitForSleepers(count: 1)
    /// await clock.advance(by: .seconds(2))
    /// try await sleeper.value
    /// ```
    ///
    /// - Parameters:
    ///   - deadline: The instant to wake at.
    ///   - tolerance: Ignored: the sleeper wakes exactly at the advance that reaches `deadline`. The
    ///     default is `nil`.
    /// - Throws: `CancellationError` when the task is cancelled, before or while it sleeps; it is resumed
    ///   promptly, without waiting for an advance.
    public func sleep(until deadline: Instant, tolerance: Swift.Duration? = nil) async throws {
        try Task.checkCancellation()
        let id: UInt64? = state.withLock { state in
            deadline <= state.now ? nil : state.makeID()
        }
        guard let id else { return }

        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                // Deciding and storing happen under the lock, and the cancellation handler below takes the
                // lock too. The runtime marks a task cancelled before it runs the task's cancellation
                // handlers, so either this block sees `isCancelled` (and the handler finds nothing to
                // resume), or it stores the sleeper before the handler looks (and the handler resumes it).
                // Each continuation is resumed exactly once, by whoever removes it from `sleepers`.
                enum Outcome {
                    case cancelled
                    case deadlineReached
                    case suspended(waiters: [CheckedContinuation<Void, Never>])
                }
                let outcome: Outcome = state.withLock { state in
                    if Task.isCancelled { return .cancelled }
                    // An advance may have happened since the check above.
                    if deadline <= state.now { return .deadlineReached }
                    state.sleepers[id] = Sleeper(deadline: deadline, continuation: continuation)
                    return .suspended(waiters: state.takeSatisfiedWaiters())
                }
                switch outcome {
                case .cancelled:
                    continuation.resume(throwing: CancellationError())
                case .deadlineReached:
                    continuation.resume()
                case .suspended(let waiters):
                    for waiter in waiters {
                        waiter.resume()
                    }
                }
            }
        } onCancel: {
            let sleeper = state.withLock { $0.sleepers.removeValue(forKey: id) }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves the clock forward by `duration` and resumes every sleeper whose deadline is now reached.
    ///
    /// The same as ``advance(to:)`` with `now.advanced(by: duration)`; see there for the details.
    ///
    /// ```swift
    /// await clock.waitForSleepers(count: 1)
    /// await clock.advance(by: .seconds(30))
    /// ```
    ///
    /// - Parameter duration: How far to move. A negative duration does nothing: time never moves
    ///   backwards.
    public func advance(by duration: Swift.Duration) async {
        await advance { $0.advanced(by: max(duration, .zero)) }
    }

    /// Moves the clock forward to `instant` and resumes every sleeper whose deadline is now reached.
    ///
    /// Due sleepers are resumed in deadline order (sleepers with the same deadline in the order they started
    /// sleeping), all with the clock already at `instant`: time jumps, it does not step through each
    /// deadline. A task that goes back to sleep after waking therefore sleeps relative to `instant`; to drive
    /// a periodic loop through several periods, advance one period at a time and call
    /// ``waitForSleepers(count:)`` in between.
    ///
    /// An `instant` that is not later than ``now`` leaves the clock unchanged.
    ///
    /// After resuming sleepers the method yields a few times, so that resumed tasks get a chance to run
    /// before it returns. This is best effort only: resumed tasks run on the concurrent executor, in no
    /// guaranteed order and at no guaranteed time. Tests should wait for an observable condition (a task's
    /// value, ``waitForSleepers(count:)``, a value in a stream) rather than assume a resumed task has
    /// already done its work.
    ///
    /// ```swift
    /// let clock = ManualClock()
    /// // … start something that sleeps until 10 s …
    /// await clock.waitForSleepers(count: 1)
    /// await clock.advance(to: .zero.advanced(by: .seconds(10)))
    /// ```
    ///
    /// - Parameter instant: The time to move to.
    public func advance(to instant: Instant) async {
        await advance { _ in instant }
    }

    /// Suspends the calling task until at least `count` tasks are suspended in ``sleep(until:tolerance:)``.
    ///
    /// Returns at once when ``sleeperCount`` is already at least `count`. Otherwise the task is resumed by
    /// the sleep that brings the count to `count` (there is no polling). This is how a test knows that a
    /// background loop has reached its sleep, so that the next advance wakes it.
    ///
    /// The count is of tasks asleep at the same time: a sleeper that an advance has resumed no longer
    /// counts, so `waitForSleepers(count: 1)` right after an advance waits for a loop to go back to sleep.
    ///
    /// If the waiting task is cancelled, the method returns early, without the condition being met, so a
    /// cancelled test does not hang here.
    ///
    /// ```swift
    /// let clock = ManualClock()
    /// let workers = (0..<3).map { _ in Task { try await clock.sleep(for: .seconds(1)) } }
    /// await clock.waitForSleepers(count: 3)
    /// #expect(clock.sleeperCount == 3)
    /// ```
    ///
    /// - Parameter count: The number of sleepers to wait for.
    public func waitForSleepers(count: Int) async {
        let id: UInt64? = state.withLock { state in
            state.sleepers.count >= count ? nil : state.makeID()
        }
        guard let id else { return }

        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                // The same reasoning as in `sleep(until:tolerance:)`: deciding and storing happen under the
                // lock, so a cancellation either is seen here or finds the stored waiter.
                let resumeNow = state.withLock { state in
                    if Task.isCancelled || state.sleepers.count >= count { return true }
                    state.sleeperWaiters[id] = SleeperWaiter(count: count, continuation: continuation)
                    return false
                }
                if resumeNow {
                    continuation.resume()
                }
            }
        } onCancel: {
            let waiter = state.withLock { $0.sleeperWaiters.removeValue(forKey: id) }
            waiter?.continuation.resume()
        }
    }

    /// Moves time to `target(now)` when that is later than now, resumes the due sleepers in deadline order,
    /// then yields a few times.
    private func advance(_ target: (Instant) -> Instant) async {
        let due: [CheckedContinuation<Void, any Error>] = state.withLock { state in
            let instant = target(state.now)
            guard instant > state.now else { return [] }
            state.now = instant
            let dueSleepers = state.sleepers
                .filter { $0.value.deadline <= instant }
                .sorted { ($0.value.deadline, $0.key) < ($1.value.deadline, $1.key) }
            for (id, _) in dueSleepers {
                state.sleepers[id] = nil
            }
            return dueSleepers.map(\.value.continuation)
        }
        for continuation in due {
            continuation.resume()
        }
        for _ in 0..<Self.yieldsAfterAdvance {
            await Task.yield()
        }
    }
}
