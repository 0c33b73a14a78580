import Foundation
import Testing

@testable import AttachmentSync

/// The queue against random histories of saves, deletes, rows coming and going, on-demand downloads,
/// purges, cache limits, sync starting and stopping, a remote that fails, lies and truncates, transfers
/// handed to a background service (which runs them while the process is dead, loses some and reports some
/// twice), and the process dying at any durable operation; every invariant of ``ModelRun`` is checked after
/// every step. About 30 % of the setups (drawn from the seed) encrypt end to end, with keys rotated, lost
/// and restored mid-history (see ``ModelEncryption``).
///
/// `ATTACHMENT_SYNC_MODEL_HISTORIES` sets how many histories run (the default keeps the suite quick; set
/// it to tens of thousands for a soak), `ATTACHMENT_SYNC_MODEL_SEED` the first seed, and
/// `ATTACHMENT_SYNC_MODEL_LENGTH` the steps per history. A failure prints its seed and a shrunk history.
/// `ATTACHMENT_SYNC_MODEL_DEBUG=1` sends the queue's log (debug level) to standard error, for a replay.
@Suite("Model-based histories", .serialized)
struct ModelBasedTests {
    static let environment = ProcessInfo.processInfo.environment
    static let histories = environment["ATTACHMENT_SYNC_MODEL_HISTORIES"].flatMap(Int.init) ?? 2000
    static let firstSeed = environment["ATTACHMENT_SYNC_MODEL_SEED"].flatMap(UInt64.init) ?? 1
    static let length = environment["ATTACHMENT_SYNC_MODEL_LENGTH"].flatMap(Int.init) ?? 30
    /// `ATTACHMENT_SYNC_MODEL_SHRINK=0` reports a failing history as it is, without shrinking it.
    static let shrinks = environment["ATTACHMENT_SYNC_MODEL_SHRINK"] != "0"

    @Test("random histories with crashes and remote faults keep every invariant")
    func randomHistories() async throws {
        // Two at a time: the machines have two cores.
        let seeds = Array(Self.firstSeed..<(Self.firstSeed + UInt64(Self.histories)))
        let failure = await withTaskGroup(of: (ModelHistory, [String])?.self) { group -> (ModelHistory, [String])? in
            var next = seeds.makeIterator()
            func start() {
                guard let seed = next.next() else { return }
                group.addTask {
                    let history = ModelHistory.random(seed: seed, length: Self.length)
                    let violations = await Self.run(history)
                    return violations.isEmpty ? nil : (history, violations)
                }
            }
            start()
            start()
            while let result = await group.next() {
                if let result {
                    group.cancelAll()
                    return result
                }
                start()
            }
            return nil
        }
        guard let (history, violations) = failure else { return }
        let shrunk =
            Self.shrinks
            ? await Self.shrink(history, kind: Self.kind(of: violations[0]))
            : (history: history, violations: violations)
        Issue.record(
            """
            history \(history.seed) broke an invariant: \(violations.joined(separator: "\n  "))
            Replay it alone with ATTACHMENT_SYNC_MODEL_SEED=\(history.seed) ATTACHMENT_SYNC_MODEL_HISTORIES=1.
            Shrunk to \(shrunk.history.steps.count) of \(history.steps.count) steps:
            \(shrunk.history)
            violations: \(shrunk.violations.joined(separator: "\n  "))
            """)
    }

    static func run(_ history: ModelHistory) async -> [String] {
        do {
            return try await ModelRun(history).run()
        } catch {
            return ["the harness could not start: \(error)"]
        }
    }

    /// The kind tag a violation starts with (`[lost]`, `[bytes]`…).
    static func kind(of violation: String) -> String {
        String(violation.prefix { $0 != " " })
    }

    /// Removes steps while the history still breaks an invariant of the same kind (a run counts as failing
    /// if either of two tries does, as concurrent work makes a few histories depend on scheduling), up to a
    /// bounded number of runs.
    static func shrink(_ history: ModelHistory, kind: String) async -> (history: ModelHistory, violations: [String]) {
        var best = history
        var bestViolations = await run(history)
        var runs = 0
        var chunk = max(1, best.steps.count / 2)
        while chunk >= 1, runs < 400 {
            var index = 0
            var removedAny = false
            while index < best.steps.count, runs < 400 {
                var candidate = best
                candidate.steps.removeSubrange(index..<min(index + chunk, candidate.steps.count))
                var violations: [String] = []
                for _ in 0..<2 where violations.isEmpty {
                    runs += 1
                    violations = await run(candidate).filter { Self.kind(of: $0) == kind }
                }
                if violations.isEmpty {
                    index += chunk
                } else {
                    best = candidate
                    bestViolations = violations
                    removedAny = true
                }
            }
            if !removedAny { chunk /= 2 }
        }
        return (best, bestViolations)
    }
}
