import AttachmentSync
import Foundation

/// P13: whether the work per transfer stays flat as the queue grows. The same number of uploads to a
/// folder remote is timed with a short queue and with a long one; the figure is the process's CPU time
/// (user + system, from `getrusage`) per finished upload.
///
/// Set-up (not timed): N `queuedUpload` records inserted with SQL in one transaction (as `saveFile` leaves
/// them: a local file, its size and SHA-256), each file a hard link to one 8-byte file, then the queue's
/// startup and its background check. Timed: from `startSync()` until a watch of the table counts at least
/// 1,000 (200) more records synced and `stopSync()` has returned; the CPU time is divided by the uploads that
/// finished. The remaining records stay queued, so the long queue really is long while the uploads run.
/// Three rounds (one with `--quick`), each a short queue on a fresh device and the long queue's next batch.
/// Checked afterwards: every synced record's remote copy holds the 8 bytes, every other record is still
/// queued, and the remote folder holds nothing else.
enum QueueLengthScenario {
    /// The most the long queue's CPU time per upload may be, as a multiple of the short queue's.
    static let target = 1.2
    /// The bytes of every file.
    static let content = Data("8 bytes!".utf8)
    /// SHA-256 of ``content``, in hex.
    static let contentSHA256 = "63e26b011d7df97776a4f00a99c8c9a68759356a5058fb1ac9fb4fbf74f92305"

    /// What one queue length measured.
    struct Figures: Sendable {
        /// Records queued when sync started.
        var queued: Int
        /// Uploads finished in the timed part (the ones asked for, or a few more).
        var uploads: Int
        /// CPU time from `startSync()` until `uploads` were synced.
        var cpu: Duration
        /// Wall-clock time of the same.
        var elapsed: Duration
        /// The queue's startup over `queued` records (not part of the figure; zero for the long queue's later
        /// batches, which reuse the first one's queue).
        var startup: Duration

        /// CPU time per finished upload.
        var cpuPerUpload: Duration { cpu / uploads }
    }

    /// Runs P13: `rounds` rounds, each timing one batch of uploads with the short queue (on a fresh device)
    /// and then one with the long queue. The long queue's batches run one after another on one device, so
    /// it stays long (100,000 queued, then 99,000 and so on); the figure is the ratio of the medians, and the
    /// spread of the rounds' own ratios says whether a miss is noise.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let (short, long, uploads) = size == .full ? (1_000, 100_000, 1_000) : (200, 10_000, 200)
        let rounds = size == .full ? 3 : 1
        let (small, large) = try await measureRounds(short: short, long: long, uploads: uploads, rounds: rounds)
        let smallCPU = median(small.map(\.cpuPerUpload))
        let largeCPU = median(large.map(\.cpuPerUpload))
        let ratio = largeCPU.seconds / smallCPU.seconds
        return ScenarioReport(
            title: "CPU per upload to a folder remote with \(formatCount(short)) vs \(formatCount(long)) queued",
            figures: "\(formatDuration(smallCPU)) vs \(formatDuration(largeCPU)) per upload "
                + "(at least \(formatCount(uploads)) uploads each"
                + (rounds > 1 ? "; medians of \(rounds) rounds)" : ")"),
            result: "\(formatRatio(ratio)) the short queue's",
            target: "target ≤ \(formatRatio(target))",
            verdict: ratio <= target ? .pass : .miss,
            details: zip(small, large).enumerated().flatMap { round, pair in
                [pair.0, pair.1].map { figures in
                    "round \(round + 1), \(formatCount(figures.queued)) queued: \(formatCount(figures.uploads)) "
                        + "uploads took \(formatDuration(figures.elapsed)) and \(formatDuration(figures.cpu)) of CPU; "
                        + "queue startup \(formatDuration(figures.startup))"
                }
            }
        ).withRounds(RoundRatios(large.map(\.cpuPerUpload), over: small.map(\.cpuPerUpload)), atMost: target)
    }

    /// The rounds' figures: each round a batch with a short queue of its own, then the long queue's next
    /// batch.
    private static func measureRounds(
        short: Int, long: Int, uploads: Int, rounds: Int
    ) async throws -> (small: [Figures], large: [Figures]) {
        try await withWorkFolder("p13-long") { folder in
            let remoteFolder = try folder.makeFolder("remote")
            let remote = FileSystemRemoteStorage(directory: remoteFolder)
            return try await withDevice(in: folder, remote: remote) { device in
                try await populate(device, count: long)
                let (_, startup) = try await measure { try await device.queue.waitForInit() }
                // Startup's background check is startup's cost (P10), not the uploads'.
                try await device.queue.waitForStartupCheck()
                var small: [Figures] = []
                var large: [Figures] = []
                for _ in 0..<rounds {
                    small.append(try await measureShortQueue(queued: short, uploads: uploads))
                    var batch = try await measureBatch(device, uploads: uploads)
                    batch.startup = large.isEmpty ? startup : .zero
                    large.append(batch)
                }
                try await verify(device, remoteFolder: remoteFolder, count: long)
                return (small, large)
            }
        }
    }

    /// One batch with a short queue: `queued` records on a fresh device, of which `uploads` are timed.
    private static func measureShortQueue(queued count: Int, uploads: Int) async throws -> Figures {
        try await withWorkFolder("p13") { folder in
            let remoteFolder = try folder.makeFolder("remote")
            let remote = FileSystemRemoteStorage(directory: remoteFolder)
            return try await withDevice(in: folder, remote: remote) { device in
                try await populate(device, count: count)
                let (_, startup) = try await measure { try await device.queue.waitForInit() }
                try await device.queue.waitForStartupCheck()
                var figures = try await measureBatch(device, uploads: uploads)
                figures.startup = startup
                try await verify(device, remoteFolder: remoteFolder, count: count)
                return figures
            }
        }
    }

    /// Times `uploads` more uploads of `device`'s queue: from `startSync()` until that many more records
    /// are synced and `stopSync()` has returned.
    private static func measureBatch(_ device: Device, uploads: Int) async throws -> Figures {
        let syncedBefore = try await device.count(in: .synced)
        let queued = try await device.count(in: .queuedUpload)
        let cpuBefore = CPUTime.used()
        let (_, elapsed) = try await measure {
            try await device.queue.startSync()
            do {
                try await device.waitForCount(syncedBefore + uploads, orMore: true, in: .synced, seconds: 300)
            } catch {
                let states = try await device.db.getAll(
                    sql: "SELECT state, count(*) AS n, max(last_error) AS error FROM attachments GROUP BY state"
                ) {
                    "state \(try $0.getInt(name: "state")): \(try $0.getInt(name: "n")) "
                        + "(\(try $0.getStringOptional(name: "error") ?? "no error"))"
                }
                throw BenchmarkFailure("\(error); records by state: \(states.joined(separator: "; "))")
            }
        }
        await device.queue.stopSync()
        let cpu = CPUTime.used() - cpuBefore
        // The watch's emissions are coalesced: a few more than `uploads` may have finished.
        let finished = try await device.count(in: .synced) - syncedBefore
        return Figures(queued: queued, uploads: finished, cpu: cpu, elapsed: elapsed, startup: .zero)
    }

    /// Inserts `count` queued uploads, oldest first by id, each with its local file.
    private static func populate(_ device: Device, count: Int) async throws {
        try await populateRecords(
            device, count: count, state: .queuedUpload, prefix: "u", content: content, sha256: contentSHA256)
    }

    /// Every synced record's remote copy holds the content and the remote holds nothing else; every other
    /// record is still a queued upload.
    private static func verify(_ device: Device, remoteFolder: URL, count: Int) async throws {
        let states = try await device.db.getAll(sql: "SELECT id, state FROM attachments") {
            (try $0.getString(name: "id"), try $0.getInt(name: "state"))
        }
        guard states.count == count else {
            throw BenchmarkFailure("expected \(count) records, found \(states.count)")
        }
        var synced: Set<String> = []
        for (id, state) in states {
            switch AttachmentState(rawValue: state) {
            case .synced: synced.insert(id + ".bin")
            case .queuedUpload: break
            default: throw BenchmarkFailure("record \(id) is in state \(state), expected synced or queuedUpload")
            }
        }
        // Besides each file, the folder remote keeps its SHA-256 in a hidden file. An upload that stopSync
        // interrupted after its copy landed leaves its record queued (it is uploaded again, idempotently).
        let stored = Set(
            try FileManager.default.contentsOfDirectory(atPath: remoteFolder.path).filter { !$0.hasPrefix(".") })
        let known = Set(states.map { $0.0 + ".bin" })
        guard synced.isSubset(of: stored), stored.isSubset(of: known), stored.count <= synced.count + 16 else {
            throw BenchmarkFailure(
                "the remote folder holds \(stored.count) files for \(synced.count) synced records "
                    + "(\(stored.symmetricDifference(synced).sorted().prefix(3)) differ)")
        }
        for name in stored {
            guard FileManager.default.contents(atPath: remoteFolder.appendingPathComponent(name).path) == content else {
                throw BenchmarkFailure("the remote copy \(name) has the wrong bytes")
            }
        }
    }
}
