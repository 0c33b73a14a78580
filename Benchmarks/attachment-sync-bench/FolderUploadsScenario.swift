import AttachmentSync
import Foundation

/// P2: many 64 KiB `saveFile(data:…)` calls uploaded to a ``FileSystemRemoteStorage`` folder, against a
/// loop that is as durable: it writes the same bytes to a file, flushed, and copies it into a folder,
/// flushed too. A plain loop (`Data.write(to:)`, then `FileManager.copyItem`) is printed for information.
///
/// The queue runs with its default `maxConcurrentTransfers` (4) and a 10 ms throttle, sync on from the
/// start; the time runs from the first `saveFile` until the table shows every attachment synced (seen
/// through a watch). Both sides are then checked byte for byte, local and remote.
///
/// The disk is noisy (a virtual disk's flushes), so the two sides take turns three times (once with
/// `--quick`) and the medians are compared. Note that on Linux `Data.write(to:)` flushes the file
/// (`fsync`) itself, so the plain loop is one durable write and one unflushed copy per file.
enum FolderUploadsScenario {
    /// The size of each file.
    static let fileSize = 64 * 1024
    /// The most the queue may take, as a multiple of the as-durable loop's time.
    static let targetRatio = 1.3

    /// Runs P2.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let count = size == .full ? 2000 : 200
        let files = (0..<count).map { content(index: $0, size: fileSize) }
        var baselines: [Duration] = []
        var durableBaselines: [Duration] = []
        var projects: [Duration] = []
        for _ in 0..<(size == .full ? 3 : 1) {
            baselines.append(try await plainLoop(files, durable: false))
            projects.append(try await queueUploads(files))
            durableBaselines.append(try await plainLoop(files, durable: true))
        }
        let plain = median(baselines)
        let durable = median(durableBaselines)
        let project = median(projects)
        let ratio = project.seconds / durable.seconds
        return ScenarioReport(
            title: "\(formatCount(count)) × 64 KiB saves to a folder remote",
            figures: "queue \(formatDuration(project)) vs an as-durable write+copy loop \(formatDuration(durable))"
                + (projects.count > 1 ? " (medians of \(projects.count))" : ""),
            result: "\(formatRatio(ratio)) the baseline",
            target: "target ≤ \(targetRatio)×",
            verdict: ratio <= targetRatio ? .pass : .miss,
            details: [
                String(
                    format: "per file: queue %.2f ms, as-durable loop %.2f ms, plain loop %.2f ms",
                    project.milliseconds / Double(count), durable.milliseconds / Double(count),
                    plain.milliseconds / Double(count)),
                "rounds: queue " + projects.map(formatDuration).joined(separator: ", ") + "; as-durable loop "
                    + durableBaselines.map(formatDuration).joined(separator: ", ") + "; plain loop "
                    + baselines.map(formatDuration).joined(separator: ", "),
                "for information, a plain loop (Data.write, which flushes on Linux, then an unflushed copy): "
                    + "\(formatDuration(plain)); the queue takes " + formatRatio(project.seconds / plain.seconds)
                    + " that",
            ])
    }

    /// The baseline: for each file, `Data.write(to:)` into one folder, then `FileManager.copyItem` into
    /// another. With `durable`, for comparison only: the file is written and flushed with system calls
    /// (`Data.write(to:)` flushes on Linux, not on Apple platforms) and the copy is flushed too.
    private static func plainLoop(_ files: [Data], durable: Bool) async throws -> Duration {
        try await withWorkFolder("p2-plain") { folder in
            let local = try folder.makeFolder("local")
            let remote = try folder.makeFolder("remote")
            let (_, elapsed) = try await measure {
                for (index, data) in files.enumerated() {
                    let name = "\(index).bin"
                    let source = local.appendingPathComponent(name)
                    let copy = remote.appendingPathComponent(name)
                    if durable {
                        try writeDurably(data, to: source.path)
                    } else {
                        try data.write(to: source)
                    }
                    try FileManager.default.copyItem(at: source, to: copy)
                    if durable { try flushFile(atPath: copy.path) }
                }
            }
            for (index, data) in files.enumerated() {
                let name = "\(index).bin"
                guard FileManager.default.contents(atPath: local.appendingPathComponent(name).path) == data,
                    FileManager.default.contents(atPath: remote.appendingPathComponent(name).path) == data
                else { throw BenchmarkFailure("the plain loop's copy of file \(index) has the wrong bytes") }
            }
            return elapsed
        }
    }

    /// The project: `saveFile` each file with sync on, until every attachment is synced.
    private static func queueUploads(_ files: [Data]) async throws -> Duration {
        try await withWorkFolder("p2-queue") { folder in
            let remoteFolder = try folder.makeFolder("remote")
            let remote = FileSystemRemoteStorage(directory: remoteFolder)
            return try await withDevice(in: folder, remote: remote) { device in
                try await device.queue.startSync()
                let (ids, elapsed) = try await device.saveUntilSynced(files)
                let expected = Dictionary(uniqueKeysWithValues: zip(ids, files))
                try await verifyAllSynced(device, expected: expected, remote: .folder(remoteFolder))
                return elapsed
            }
        }
    }
}
