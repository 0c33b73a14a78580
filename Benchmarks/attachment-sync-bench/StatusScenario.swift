import AttachmentSync
import Foundation
import TestSupport

/// P19: `attachment-sync status` over a table of 1,000,000 (10,000) attachments, the command an operator runs
/// on a device's or a server's database.
///
/// Set-up (not timed): the records inserted with SQL in one transaction, in the mix a busy app's table has:
/// 85 % synced (half of them with their file on the device), 5 % queued uploads, 5 % queued downloads, one
/// in a thousand waiting for a retry with an error, 2 % archived (one in a thousand given up), 1 % queued
/// deletes, sizes from 1 KB to 5 MB. Timed: the release build of the `attachment-sync` executable, from
/// this executable's folder, run as a process on the database, three times with its table and three with
/// `--json`, each from the launch until it exits (its output discarded); the figure is the slower of the
/// two medians. Its peak resident set is the child's `VmHWM`, read from `/proc/<pid>/status` every
/// 2 ms while it runs. Checked: each run exits with 0
/// and, once, the JSON counts equal what was inserted. For comparison, the floor: one `count(*)` and
/// `total(size)` by state, read with `LocalDatabase` in this process.
enum StatusScenario {
    /// The most one run may take at the full size.
    static let targetSeconds = 1.0
    /// Runs of each form.
    static let rounds = 3

    /// Runs P19.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let count = size == .full ? 1_000_000 : 10_000
        let executable = ChildProcess.thisExecutable().deletingLastPathComponent().appendingPathComponent(
            "attachment-sync")
        guard FileManager.default.isExecutableFile(atPath: executable.path) else {
            throw BenchmarkFailure(
                "P19 runs the attachment-sync executable next to this one, and \(executable.path) is missing: "
                    + "build it with `swift build -c release --product attachment-sync`")
        }
        return try await withWorkFolder("p19") { folder in
            let database = folder.path("app.sqlite")
            let (expected, setup) = try await measure { try await populate(database, count: count) }
            var table: [Duration] = []
            var json: [Duration] = []
            var peaks: [Int64] = []
            for round in 0..<rounds {
                for asJSON in [false, true] {
                    let (elapsed, peak, output) = try await runStatus(
                        executable.path, database: database, json: asJSON, capture: asJSON && round == 0)
                    if asJSON { json.append(elapsed) } else { table.append(elapsed) }
                    peaks.append(peak)
                    if let output { try check(output, expected: expected, count: count) }
                }
            }
            let floor = try await floor(database)
            let figure = max(median(table), median(json))
            let peak = peaks.max() ?? 0
            return ScenarioReport(
                title: "attachment-sync status over \(formatCount(count)) attachments",
                figures: "table \(formatDuration(median(table))), --json \(formatDuration(median(json))) (medians of "
                    + "\(rounds), from launch to exit); peak RSS \(formatMiB(peak)); the floor, totals by state "
                    + "in-process: \(formatDuration(floor))",
                result: "\(formatDuration(figure)), \(formatRatio(figure.seconds / floor.seconds)) the floor",
                target: "target ≤ \(formatDuration(.seconds(targetSeconds))) at \(formatSizeLabel(count))",
                verdict: figure.seconds <= targetSeconds ? .pass : .miss,
                details: [
                    "runs: table " + table.map(formatDuration).joined(separator: ", ") + "; --json "
                        + json.map(formatDuration).joined(separator: ", "),
                    "peak RSS of each run: " + peaks.map(formatMiB).joined(separator: ", "),
                    "set-up \(formatDuration(setup))",
                ])
        }
    }

    /// The records by state the set-up inserted.
    struct Expected: Sendable {
        var byState: [AttachmentState: Int]
        var retries: Int
        var givenUp: Int
    }

    /// Inserts `count` records in the mix the scenario describes and returns what a status must count.
    private static func populate(_ path: String, count: Int) async throws -> Expected {
        let db = try LocalDatabase(path: path, schema: Device.schema)
        do {
            try await db.writeTransaction { tx in
                // Row i's class is i % 100; retries are i % 1000 == 991 (queued downloads), give-ups i % 1000 == 995
                // (archived).
                try tx.execute(
                    sql: """
                        WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < ?1),
                        rows(i, c) AS (SELECT i, i % 100 FROM seq)
                        INSERT INTO attachments (id, filename, state, timestamp, has_synced, local_uri, size,
                                                 content_hash, attempts, next_attempt_at, last_error, given_up)
                        SELECT printf('a%07d', i), printf('a%07d.jpg', i),
                               CASE WHEN c < 85 THEN 3 WHEN c < 90 THEN 1 WHEN c < 95 THEN 0
                                    WHEN c < 97 THEN 4 WHEN c < 98 THEN 2 ELSE 3 END,
                               1700000000000 + i,
                               CASE WHEN c < 85 OR c >= 98 OR c IN (95, 96) THEN 1 ELSE 0 END,
                               CASE WHEN (c < 85 AND i % 2 = 0) OR (c >= 85 AND c < 90) THEN printf('a%07d.jpg', i) END,
                               1000 + (i * 7919) % 5000000,
                               printf('%064x', i),
                               CASE WHEN i % 1000 = 991 THEN 3 ELSE 0 END,
                               CASE WHEN i % 1000 = 991 THEN 1900000000000 END,
                               CASE WHEN i % 1000 = 991 THEN 'the server answered 503'
                                    WHEN i % 1000 = 995 THEN 'no such object' END,
                               CASE WHEN i % 1000 = 995 THEN 0 END
                        FROM rows
                        """,
                    parameters: [count])
            }
            let byState = try await db.getAll(sql: "SELECT state, count(*) AS n FROM attachments GROUP BY state") {
                (try $0.getInt(name: "state"), try $0.getInt(name: "n"))
            }
            let retries = try await db.get(
                sql: "SELECT count(*) AS n FROM attachments WHERE next_attempt_at IS NOT NULL"
            ) { try $0.getInt(name: "n") }
            let givenUp = try await db.get(sql: "SELECT count(*) AS n FROM attachments WHERE given_up IS NOT NULL") {
                try $0.getInt(name: "n")
            }
            try await db.close()
            var states: [AttachmentState: Int] = [:]
            for (raw, n) in byState {
                guard let state = AttachmentState(rawValue: raw) else { throw BenchmarkFailure("state \(raw)?") }
                states[state] = n
            }
            guard states.values.reduce(0, +) == count, retries > 0, givenUp > 0 else {
                throw BenchmarkFailure("the P19 set-up inserted \(states), \(retries) retries, \(givenUp) given up")
            }
            return Expected(byState: states, retries: retries, givenUp: givenUp)
        } catch {
            try? await db.close()
            throw error
        }
    }

    /// Runs `attachment-sync status` once; returns its time from launch to exit, its peak resident set, and
    /// its output when `capture` is set.
    private static func runStatus(
        _ executable: String, database: String, json: Bool, capture: Bool
    ) async throws -> (Duration, Int64, String?) {
        let clock = ContinuousClock()
        let start = clock.now
        let child: ChildProcess
        do {
            child = try ChildProcess(
                executable, ["status", database] + (json ? ["--json"] : []), environment: [:],
                standardOutput: capture ? .capture() : .discard, standardError: .capture())
        } catch {
            throw BenchmarkFailure("cannot start attachment-sync status: \(error)")
        }
        // The child's own peak, read from its /proc status while it runs (`VmHWM` only grows). Not `wait4`'s
        // `ru_maxrss`: a child started with `posix_spawn` (a `vfork`) carries this process's peak in it.
        let sampler = Task {
            var peak: Int64 = 0
            while !Task.isCancelled {
                if let kibibytes = Memory.procStatusKiB("VmHWM", pid: child.pid) { peak = max(peak, kibibytes * 1024) }
                try? await Task.sleep(for: .milliseconds(2))
            }
            return peak
        }
        let termination = try await child.wait(seconds: 300)
        let elapsed = clock.now - start
        sampler.cancel()
        let peak = await sampler.value
        guard termination == .exited(0) else {
            throw BenchmarkFailure("attachment-sync status \(termination): \(child.capturedError)")
        }
        guard peak > 0 else { throw BenchmarkFailure("could not read the status run's peak RSS") }
        return (elapsed, peak, capture ? child.capturedOutput : nil)
    }

    /// The JSON report counts every state as inserted, and the retries and give-ups.
    private static func check(_ output: String, expected: Expected, count: Int) throws {
        struct Report: Decodable {
            struct State: Decodable {
                var count: Int
            }
            var records: Int
            var states: [String: State]
            var waitingForRetry: [AnyDecodable]
            var givenUp: [AnyDecodable]
        }
        struct AnyDecodable: Decodable {
            init(from decoder: any Decoder) throws {}
        }
        let report: Report
        do {
            report = try JSONDecoder().decode(Report.self, from: Data(output.utf8))
        } catch {
            throw BenchmarkFailure("attachment-sync status --json printed what P19 cannot read: \(error)")
        }
        let counted = Dictionary(uniqueKeysWithValues: report.states.map { ($0.key, $0.value.count) })
        let inserted = Dictionary(uniqueKeysWithValues: expected.byState.map { ("\($0.key)", $0.value) })
        guard report.records == count, counted.filter({ $0.value > 0 }) == inserted else {
            throw BenchmarkFailure("status counted \(report.records) records, \(counted), not \(count), \(inserted)")
        }
        guard report.waitingForRetry.count == expected.retries, report.givenUp.count == expected.givenUp else {
            throw BenchmarkFailure(
                "status listed \(report.waitingForRetry.count) retries and \(report.givenUp.count) give-ups, not "
                    + "\(expected.retries) and \(expected.givenUp)")
        }
    }

    /// One `count(*)` and `total(size)` of each state, in this process.
    private static func floor(_ path: String) async throws -> Duration {
        let db = try LocalDatabase.readOnly(path: path)
        let (_, elapsed) = try await measure {
            try await db.getAll(
                sql: "SELECT state, count(*) AS n, total(size) AS bytes FROM attachments GROUP BY state"
            ) { try $0.getInt(name: "n") }
        }
        try await db.close()
        return elapsed
    }
}
