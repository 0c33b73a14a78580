import AttachmentSync
import AttachmentSyncTesting
import Foundation

/// P15: a download asked for (`download(attachmentId:)`, what a user's tap does) while 1,000 automatic
/// downloads are queued against a slow remote (50 ms a call, 4 transfers at once), against the same
/// download with nothing queued. The time runs from the call until it returns with the 64 KiB file on disk
/// (for a file this small, its time to first byte and to last differ by a chunk). Five taps each, medians
/// compared.
enum OnDemandPriorityScenario {
    /// The remote's latency per call.
    static let latency = Duration.milliseconds(50)
    /// The most the busy queue's tap may take, as a multiple of the idle one's.
    static let targetRatio = 1.5
    /// The taps timed on each side.
    static let taps = 5

    /// Runs P15.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let backlog = size == .full ? 1000 : 200
        let idle = try await taps(backlog: 0)
        let busy = try await taps(backlog: backlog)
        let ratio = median(busy.times).seconds / median(idle.times).seconds
        return ScenarioReport(
            title: "a download asked for with \(formatCount(backlog)) automatic downloads queued, 50 ms remote",
            figures: "median \(formatDuration(median(busy.times))) vs \(formatDuration(median(idle.times))) "
                + "with nothing queued",
            result: "\(formatRatio(ratio)) the idle queue",
            target: "target ≤ \(targetRatio)×",
            verdict: ratio <= targetRatio ? .pass : .miss,
            details: [
                "busy: " + busy.times.map(formatDuration).joined(separator: ", ") + "; idle: "
                    + idle.times.map(formatDuration).joined(separator: ", "),
                "automatic downloads finished meanwhile: \(busy.backgroundDone) of \(backlog)",
            ])
    }

    /// Times `taps` downloads asked for on a syncing queue with `backlog` automatic downloads queued.
    private static func taps(backlog: Int) async throws -> (times: [Duration], backgroundDone: Int) {
        try await withWorkFolder("p15") { folder in
            let remote = InMemoryRemoteStorage(latency: latency)
            for index in 0..<backlog {
                await remote.setFile(content(index: index, size: 64 * 1024), named: "auto-\(index).bin")
            }
            let tapped = (0..<taps).map { content(index: 100_000 + $0, size: 64 * 1024) }
            for (index, data) in tapped.enumerated() {
                await remote.setFile(data, named: "tap-\(index).bin")
            }
            return try await withDevice(
                in: folder, remote: remote, watchFileExtension: "bin",
                configure: { $0.downloadPolicy = .custom { $0.id.hasPrefix("tap-") ? .onDemand : .eager } }
            ) { device in
                try await device.db.writeTransaction { tx in
                    for index in 0..<taps {
                        _ = try tx.execute(
                            sql: "INSERT INTO checklists (id, photo_id) VALUES (?, ?)",
                            arguments: ["t\(index)", "tap-\(index)"])
                    }
                    for index in 0..<backlog {
                        _ = try tx.execute(
                            sql: "INSERT INTO checklists (id, photo_id) VALUES (?, ?)",
                            arguments: ["a\(index)", "auto-\(index)"])
                    }
                }
                try await device.queue.startSync()
                // The tap records are in (remote-only), and the backlog is moving: some downloads are done.
                let wanted = taps + (backlog > 0 ? 8 : 0)
                let counts = try device.db.watch(
                    sql: "SELECT count(*) AS n FROM attachments WHERE state = ?",
                    parameters: [AttachmentState.synced.rawValue]
                ) { try $0.getInt(name: "n") }
                let reached = try await withDeadline(seconds: 120) {
                    try await counts.first(where: { ($0.first ?? 0) >= wanted }) != nil
                }
                guard reached == true else { throw BenchmarkFailure("P15: the queue did not get going in 120 s") }
                var times: [Duration] = []
                for (index, data) in tapped.enumerated() {
                    let (attachment, elapsed) = try await measure {
                        try await device.queue.download(attachmentId: "tap-\(index)")
                    }
                    guard let path = attachment.localUri, FileManager.default.contents(atPath: path) == data else {
                        throw BenchmarkFailure("P15: the download asked for of tap-\(index) has the wrong bytes")
                    }
                    times.append(elapsed)
                }
                let done = try await device.count(in: .synced) - taps
                return (times, max(0, done))
            }
        }
    }
}
