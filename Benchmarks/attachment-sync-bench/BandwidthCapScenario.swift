import AttachmentSync
import Foundation

/// P14: a bandwidth cap holds. Files are uploaded from device A to a folder remote, then downloaded by
/// device B, each direction capped at the same rate (`bandwidthLimit`); the achieved rate (bytes over the
/// time from the first save, or the first row reaching B, until the last file is synced) is compared with
/// the cap. The same transfers uncapped, in the same run, show that the cap, not the disk, sets the pace.
enum BandwidthCapScenario {
    /// The cap: 4 MB/s each way.
    static let cap: Int64 = 4_000_000
    /// The size of each file: 1 MiB.
    static let fileSize = 1024 * 1024
    /// How far the achieved rate may be from the cap.
    static let tolerance = 0.10

    /// Runs P14.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let count = size == .full ? 20 : 6
        let files = (0..<count).map { content(index: $0, size: fileSize) }
        let capped = try await transfers(files, limit: .both(cap))
        let free = try await transfers(files, limit: nil)
        let bytes = Double(count * fileSize)
        let upRatio = bytes / capped.upload.seconds / Double(cap)
        let downRatio = bytes / capped.download.seconds / Double(cap)
        let worst = max(abs(upRatio - 1), abs(downRatio - 1))
        return ScenarioReport(
            title: "\(count) × 1 MiB up and down a folder remote, capped at 4 MB/s each way",
            figures: "up \(formatDuration(capped.upload)), down \(formatDuration(capped.download)); uncapped "
                + "up \(formatDuration(free.upload)), down \(formatDuration(free.download))",
            result: "achieved \(formatRatio(upRatio)) the cap up, \(formatRatio(downRatio)) down",
            target: "target within 10 % of the cap",
            verdict: worst <= tolerance ? .pass : .miss,
            details: [
                String(
                    format: "achieved rates: up %.2f MB/s, down %.2f MB/s; uncapped up %.1f MB/s, down %.1f MB/s",
                    bytes / capped.upload.seconds / 1e6, bytes / capped.download.seconds / 1e6,
                    bytes / free.upload.seconds / 1e6, bytes / free.download.seconds / 1e6)
            ])
    }

    /// Uploads `files` from one device and downloads them on another, both under `limit`; returns the time
    /// each direction took.
    private static func transfers(_ files: [Data], limit: BandwidthLimit?) async throws -> (
        upload: Duration, download: Duration
    ) {
        try await withWorkFolder("p14") { folder in
            let remoteFolder = try folder.makeFolder("remote")
            let remote = FileSystemRemoteStorage(directory: remoteFolder)
            let a = WorkFolder(existing: try folder.makeFolder("a"))
            let (ids, upload) = try await withDevice(in: a, remote: remote, configure: { $0.bandwidthLimit = limit }) {
                device in
                try await device.queue.startSync()
                let (ids, elapsed) = try await device.saveUntilSynced(files)
                try await verifyAllSynced(
                    device, expected: Dictionary(uniqueKeysWithValues: zip(ids, files)), remote: .folder(remoteFolder))
                return (ids, elapsed)
            }
            let b = WorkFolder(existing: try folder.makeFolder("b"))
            let download = try await withDevice(
                in: b, remote: remote, watchFileExtension: "bin", configure: { $0.bandwidthLimit = limit }
            ) { device in
                try await device.queue.startSync()
                let (_, elapsed) = try await measure {
                    try await device.db.writeTransaction { tx in
                        for (index, id) in ids.enumerated() {
                            _ = try tx.execute(
                                sql: "INSERT INTO checklists (id, photo_id) VALUES (?, ?)",
                                arguments: ["c\(index)", id])
                        }
                    }
                    try await device.waitForCount(files.count, in: .synced, seconds: 300)
                }
                for (id, data) in zip(ids, files) {
                    guard
                        FileManager.default.contents(
                            atPath: device.attachmentsDirectory.appendingPathComponent("\(id).bin").path) == data
                    else { throw BenchmarkFailure("P14: device B's copy of \(id) has the wrong bytes") }
                }
                return elapsed
            }
            return (upload, download)
        }
    }
}
