import AttachmentSync
import AttachmentSyncTesting
import Foundation

/// P1: uploads to a remote with 20 ms latency per call, with `maxConcurrentTransfers` 8 against the same
/// queue with 1 (sequential, as PowerSync's queue runs).
///
/// The files (1 KiB each, distinct) are saved while sync is off; the timed part is one `syncNow()`, which
/// starts transfers up to the bound and returns when the queue is idle again. Each run is then checked:
/// every record synced with the right size, local and remote bytes equal to what was saved, and the
/// remote never saw more calls at once than the bound.
enum ConcurrentUploadsScenario {
    /// The remote's latency per call.
    static let latency = Duration.milliseconds(20)
    /// The bound of the fast queue.
    static let concurrency = 8
    /// The speed-up to reach.
    static let targetSpeedup = 6.0

    /// Runs P1.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        // 64: eight rounds of eight with `--quick`.
        let count = size == .full ? 500 : 64
        let files = (0..<count).map { content(index: $0, size: 1024) }
        let parallel = try await uploadAll(files, concurrency: concurrency)
        let sequential = try await uploadAll(files, concurrency: 1)
        let speedup = sequential.seconds / parallel.seconds
        return ScenarioReport(
            title: "\(formatCount(count)) uploads, 20 ms latency",
            figures:
                "concurrency \(concurrency) \(formatDuration(parallel)) vs sequential \(formatDuration(sequential))",
            result: "\(formatRatio(speedup)) faster",
            target: "target ≥ \(Int(targetSpeedup))×",
            verdict: speedup >= targetSpeedup ? .pass : .miss,
            details: [
                "ideal: \(count) × 20 ms / \(concurrency) = \(formatDuration(latency * count / concurrency)), "
                    + "sequential \(formatDuration(latency * count))"
            ])
    }

    /// Saves `files` with sync off, then times the `syncNow()` that uploads them all, and checks the result.
    private static func uploadAll(_ files: [Data], concurrency: Int) async throws -> Duration {
        try await withWorkFolder("p1") { folder in
            let remote = InMemoryRemoteStorage(latency: latency)
            return try await withDevice(in: folder, remote: remote, maxConcurrentTransfers: concurrency) { device in
                var expected: [String: Data] = [:]
                for data in files {
                    let attachment = try await device.queue.saveFile(
                        data: data, mediaType: "application/octet-stream", fileExtension: "bin")
                    expected[attachment.id] = data
                }
                let (_, elapsed) = try await measure { try await device.queue.syncNow() }
                let stillQueued = try await device.count(in: .queuedUpload)
                guard stillQueued == 0 else {
                    throw BenchmarkFailure("syncNow returned with \(stillQueued) uploads still queued")
                }
                let peak = await remote.maxConcurrentCalls
                guard peak <= concurrency else {
                    throw BenchmarkFailure("\(peak) calls ran at once with maxConcurrentTransfers \(concurrency)")
                }
                try await verifyAllSynced(device, expected: expected, remote: .memory(remote))
                return elapsed
            }
        }
    }
}
