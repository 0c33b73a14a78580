import AttachmentSync
import Testing

/// Asynchronous clean-up for one test: what the test registers (closing a queue or a database) runs after
/// its body ends, pass or fail, newest first, before the test counts as finished. Nothing a test made then
/// outlives it: no queue still running into the next test, no temporary folder left behind when the
/// process exits.
///
/// Suites that make queues carry the ``CleansUp`` trait (`@Suite(.cleansUp)`); ``QueueHarness`` registers
/// itself.
final class TestCleanup: Sendable {
    @TaskLocal static var current: TestCleanup?

    private let actions = LockedValue<[@Sendable () async -> Void]>([])

    /// Runs `action` after the current test. Outside a suite with the trait it records an issue: the
    /// clean-up would otherwise silently never run.
    static func add(_ action: @escaping @Sendable () async -> Void) {
        guard let current else {
            Issue.record("TestCleanup.add outside a test with the .cleansUp trait")
            return
        }
        current.actions.withLock { $0.append(action) }
    }

    fileprivate func runAll() async {
        let actions = actions.withLock { actions in
            defer { actions = [] }
            return actions
        }
        for action in actions.reversed() { await action() }
    }
}

/// Gives each test of a suite a ``TestCleanup`` and runs it when the test ends.
struct CleansUp: TestTrait, SuiteTrait, TestScoping {
    var isRecursive: Bool { true }

    func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        let cleanup = TestCleanup()
        do {
            try await TestCleanup.$current.withValue(cleanup) { try await function() }
        } catch {
            await cleanup.runAll()
            throw error
        }
        await cleanup.runAll()
    }
}

extension Trait where Self == CleansUp {
    /// Runs what each test registered with ``TestCleanup/add(_:)`` when it ends.
    static var cleansUp: Self { Self() }
}
