import AttachmentSync
import Dispatch
import Foundation
import Testing

/// Two threads of these tests' own that run their tasks, so that a test's progress (and its time limit)
/// depends on its own work, not on how much the rest of the run has queued.
///
/// Swift Testing starts every test of a run at once, and by default their tasks share Swift's cooperative
/// pool: on Linux one thread per core, fed from one first-in, first-out queue. Every hop of a task through it
/// (a `Task.yield()`, a resumed continuation, a call into an actor) waits behind every job the other ~480
/// tests queued before it. In full runs on a loaded 2-core machine a single `Task.yield()` took 1 s at the
/// median and up to 50 s. The tests of ``ManualClock`` and ``InMemoryRemoteStorage`` are long chains of such
/// hops (an advance yields 10 times; the cancellation race yields 167 times), so, for milliseconds of work,
/// they took 80–160 s, and their one-minute time limits, meant to catch hangs, fired although nothing was
/// stuck.
///
/// On these threads a hop waits only for the jobs of the tests that use them. Two threads rather than one,
/// so that tasks still run in parallel: a task cancelled on one thread while it goes to sleep on the other
/// is still a real race.
@available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
final class OwnThreads: TaskExecutor {
    /// The one instance. Its threads live as long as the test process and wait, idle, when no job is queued.
    static let shared = OwnThreads(threadCount: 2)

    /// Jobs not started yet, oldest first.
    private let jobs = LockedValue<[UnownedJob]>([])
    /// Counts the jobs in `jobs`: a thread takes one only after taking one count.
    private let queued = DispatchSemaphore(value: 0)

    private init(threadCount: Int) {
        for number in 1...threadCount {
            Thread { [self] in
                // Named from inside: on Linux, Foundation names only the current thread (for stack dumps).
                Thread.current.name = "OwnThreads \(number)"
                runJobs()
            }.start()
        }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        jobs.withLock { $0.append(job) }
        queued.signal()
    }

    /// Runs queued jobs in the order they came, for as long as the process lives.
    private func runJobs() -> Never {
        while true {
            queued.wait()
            let job = jobs.withLock { $0.removeFirst() }
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

/// Runs a suite on ``OwnThreads``: every test of it, its time limit and the child tasks it starts (a task
/// started with `Task { … }` needs ``_Concurrency/Task/onOwnThreads(_:)`` instead).
///
/// Before macOS 15, iOS 18, tvOS 18 and watchOS 11, which have no task executors, the suite runs on the
/// cooperative pool as without the trait.
///
/// ```swift
/// @Suite(.timeLimit(.minutes(1)), .onOwnThreads)
/// struct ClockTests { … }
/// ```
struct OnOwnThreadsTrait: SuiteTrait, TestScoping {
    var isRecursive: Bool { false }

    /// Provides one scope, around the whole suite, so that the tasks Swift Testing starts for its tests (and,
    /// in them, for the time limits) inherit the preference for ``OwnThreads``.
    func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        test.isSuite && testCase == nil ? self : nil
    }

    func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        if #available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *) {
            try await withTaskExecutorPreference(OwnThreads.shared) { try await function() }
        } else {
            try await function()
        }
    }
}

extension Trait where Self == OnOwnThreadsTrait {
    /// Runs the suite's tests on ``OwnThreads`` (see ``OnOwnThreadsTrait``).
    static var onOwnThreads: Self { Self() }
}

extension Task where Failure == Never {
    /// Starts an unstructured task like `Task { … }`, on ``OwnThreads`` (where there are task executors).
    ///
    /// Unstructured tasks do not inherit their creator's executor preference, so tests of a suite marked
    /// ``Testing/Trait/onOwnThreads`` start theirs with this.
    @discardableResult
    static func onOwnThreads(_ operation: @escaping @Sendable () async -> Success) -> Self {
        if #available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *) {
            return Task(executorPreference: OwnThreads.shared, operation: operation)
        }
        return Task(operation: operation)
    }
}

extension Task where Failure == any Error {
    /// Starts an unstructured task like `Task { … }`, on ``OwnThreads`` (where there are task executors).
    ///
    /// Unstructured tasks do not inherit their creator's executor preference, so tests of a suite marked
    /// ``Testing/Trait/onOwnThreads`` start theirs with this.
    @discardableResult
    static func onOwnThreads(_ operation: @escaping @Sendable () async throws -> Success) -> Self {
        if #available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *) {
            return Task(executorPreference: OwnThreads.shared, operation: operation)
        }
        return Task(operation: operation)
    }
}
