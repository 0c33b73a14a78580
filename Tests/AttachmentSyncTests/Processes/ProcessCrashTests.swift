import Foundation
import TestSupport
import Testing

/// A real process (`attachment-sync-crash-worker`) saving files it is handed (moved into the queue),
/// deleting, purging and syncing with a folder remote, killed with SIGKILL at random moments, reopened and
/// checked, again and again on the same files. Whenever the kill lands, every file handed over is either
/// still where the app put it or a committed attachment with the same bytes (locally or remotely), no record
/// claims a missing file, and startup leaves no orphan.
///
/// `ATTACHMENT_SYNC_CRASH_KILLS` sets the number of kills (30), `ATTACHMENT_SYNC_CRASH_SEED` replays a run's
/// choices: the test prints its seed first and in every failure.
@Suite("Killed processes", .cleansUp)
struct ProcessCrashTests {
    static let kills = ProcessInfo.processInfo.environment["ATTACHMENT_SYNC_CRASH_KILLS"].flatMap(Int.init) ?? 30

    @Test("SIGKILL at random moments during saves, deletes, purges and transfers loses nothing")
    func killedAtRandomMoments() async throws {
        // The seed fixes every choice this test makes: each round's worker seed (from which the worker picks
        // its operations: save, delete, purge or sync, which file, whether a row refers to it) and how long
        // after its start the worker is killed. It cannot fix what the operating system decides: how far the
        // worker gets in that time (scheduling, the disk), so which operation the kill interrupts, and at
        // which step, can differ between a run and its replay, and so can the journal the next round
        // continues from. A replay runs the same plan; a failure that needs an exact moment may take a few.
        let run = try CrashWorkerRun("ProcessCrashTests", seedVariable: "ATTACHMENT_SYNC_CRASH_SEED")
        var random = SplitMix64(seed: run.seed)
        var handedOver = 0
        for round in 0..<Self.kills {
            let workerSeed = random.next()
            // Anywhere from startup to well into the loop.
            let delay = Int.random(in: 20...700, using: &random)
            print("ProcessCrashTests round \(round): worker seed \(workerSeed), killed after \(delay) ms")
            let process = try ChildProcess(
                run.worker.url.path, [run.folder.path, String(workerSeed)], standardError: .capture())
            try await Task.sleep(for: .milliseconds(delay))
            guard process.isRunning else {
                let termination = try await process.wait(seconds: 60)
                Issue.record(
                    "\(run.replay), kill \(round): the worker stopped by itself (\(termination)): \(process.capturedError)"
                )
                return
            }
            process.kill()
            let termination = try await process.wait(seconds: 60)
            #expect(
                termination == .signaled(SIGKILL),
                "\(run.replay), kill \(round): the worker \(termination) before the kill: \(process.capturedError)")
            handedOver = try await run.verify(workers: [nil], round: "kill \(round)")
        }
        // The test exercised something: more than a file per three kills (10 in the default 30), so a short
        // replay (fewer kills) is held to as much.
        #expect(handedOver > Self.kills / 3, "\(run.replay): the worker handed over \(handedOver) files in all")
    }
}
