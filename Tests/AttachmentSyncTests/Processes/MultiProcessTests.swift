import Foundation
import TestSupport
import Testing

/// Several processes of one app (the app, its share extension, a widget) on one database, attachments folder
/// and remote, each saving, deleting, purging and syncing (`attachment-sync-crash-worker … as NAME`), while
/// SIGKILL hits any of them at random moments; then all are killed and a fresh queue checks every promise:
/// every file handed over is where the app put it or a committed attachment with its bytes, no record claims
/// a missing file, no file is left that nobody owns, and no upload met another process's upload of the same
/// attachment as a conflict.
///
/// `ATTACHMENT_SYNC_MULTI_ROUNDS` sets the number of rounds (8), `ATTACHMENT_SYNC_MULTI_SEED` replays a run's
/// choices: the test prints its seed first and in every failure.
@Suite("Several processes on one folder", .cleansUp)
struct MultiProcessTests {
    static let rounds = ProcessInfo.processInfo.environment["ATTACHMENT_SYNC_MULTI_ROUNDS"].flatMap(Int.init) ?? 8
    static let names = ["app", "share", "widget"]

    /// A round's choices, all drawn from the seeded generator before the round starts.
    struct Plan: CustomStringConvertible {
        /// Each process's first worker seed (its operations; an even seed also syncs in the background).
        var seeds: [String: UInt64] = [:]
        /// A few kills of one process while the others go on, each restarted with a new worker seed.
        var kills: [(afterMilliseconds: Int, victim: String, restartSeed: UInt64)] = []
        /// How long the last processes run before all are killed.
        var endAfterMilliseconds = 0

        init(_ random: inout SplitMix64) {
            for name in MultiProcessTests.names { seeds[name] = random.next() }
            for _ in 0..<3 {
                let delay = Int.random(in: 50...400, using: &random)
                kills.append((delay, MultiProcessTests.names.randomElement(using: &random)!, random.next()))
            }
            endAfterMilliseconds = Int.random(in: 50...400, using: &random)
        }

        var description: String {
            let starts = MultiProcessTests.names.map { "\($0) \(seeds[$0]!)" }.joined(separator: ", ")
            let kills = kills.map { "\($0.afterMilliseconds) ms: \($0.victim) killed, restarted \($0.restartSeed)" }
            return "start \(starts); " + kills.joined(separator: "; ") + "; \(endAfterMilliseconds) ms: all killed"
        }
    }

    @Test("three processes saving, deleting and syncing, killed at random: nothing lost, no orphan, no conflict")
    func killedAtRandom() async throws {
        // As in ProcessCrashTests, the seed fixes the plan, not the timing. The plan: each process's worker
        // seeds (its operations, and whether it also syncs in the background), which process each kill hits,
        // and the delays. Not fixed: how far each process gets within a delay and how the three interleave
        // (the scheduler, the disk, the database's locks); so the operations the kills interrupt, and the
        // journals the next round starts from, can differ in a replay, which may take a few tries to fail.
        let run = try CrashWorkerRun("MultiProcessTests", seedVariable: "ATTACHMENT_SYNC_MULTI_SEED")
        var random = SplitMix64(seed: run.seed)
        var environment = ProcessInfo.processInfo.environment
        // Short, so that takeovers after a kill happen within a round.
        environment["ATTACHMENT_SYNC_LEASE_MS"] = "300"
        var handedOver = 0
        for round in 0..<Self.rounds {
            let plan = Plan(&random)
            print("MultiProcessTests round \(round): \(plan)")
            var processes: [String: ChildProcess] = [:]
            func start(_ name: String, seed: UInt64) throws {
                processes[name] = try ChildProcess(
                    run.worker.url.path, [run.folder.path, String(seed), "as", name], environment: environment,
                    standardError: .capture())
            }
            for name in Self.names { try start(name, seed: plan.seeds[name]!) }
            for kill in plan.kills {
                try await Task.sleep(for: .milliseconds(kill.afterMilliseconds))
                let process = processes[kill.victim]!
                guard process.isRunning else {
                    let termination = try await process.wait(seconds: 60)
                    let error = process.capturedError
                    Issue.record(
                        "\(run.replay), round \(round): \(kill.victim) stopped by itself (\(termination)): \(error)")
                    for other in processes.values { other.kill() }
                    return
                }
                process.kill()
                _ = try await process.wait(seconds: 60)
                try start(kill.victim, seed: kill.restartSeed)
            }
            try await Task.sleep(for: .milliseconds(plan.endAfterMilliseconds))
            for (name, process) in processes {
                guard process.isRunning else {
                    Issue.record("\(run.replay), round \(round): \(name) stopped by itself: \(process.capturedError)")
                    continue
                }
                process.kill()
            }
            for process in processes.values { _ = try await process.wait(seconds: 60) }
            handedOver = try await run.verify(
                workers: Self.names, leaseDuration: .milliseconds(300), round: "round \(round)")
        }
        // More than 2.5 files a round (20 in the default 8), so a short replay is held to as much.
        #expect(handedOver > Self.rounds * 5 / 2, "\(run.replay): the workers handed over \(handedOver) files in all")
    }
}
