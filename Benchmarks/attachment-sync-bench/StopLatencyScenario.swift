import AttachmentSync
import AttachmentSyncTesting
import Foundation

/// P7: how long `stopSync()` takes to return with 50 slow uploads in flight, against the same call on a
/// syncing queue with nothing in flight.
///
/// 50 files are saved with sync off; the ``InMemoryRemoteStorage`` is held (every call parks until
/// released, like a stalled network) and sync starts with `maxConcurrentTransfers` 50. Once all 50 uploads
/// are in flight, `stopSync()` is timed. This is done five times (sync is restarted each time, which
/// retries the interrupted uploads); the figure is the slowest of the five. Each time the interrupted
/// uploads must wind down (none left in flight) without any file reaching the remote or any record
/// leaving `queuedUpload`. Finally the remote is released, sync restarted, and every attachment must end
/// up synced with the right bytes.
///
/// Baseline: five `stopSync()` calls on a syncing queue whose uploads have all completed (nothing in
/// flight).
enum StopLatencyScenario {
    /// How many times stopSync is timed.
    static let rounds = 5
    /// The most stopSync may take.
    static let targetMilliseconds = 100.0

    /// Runs P7.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let inFlight = 50
        let (busy, windDown) = try await stopsWhileBusy(inFlight: inFlight)
        let idle = try await stopsWhileIdle(files: inFlight)
        let slowest = busy.max() ?? .zero
        return ScenarioReport(
            title: "stopSync with \(inFlight) transfers in flight",
            figures: "max \(formatDuration(slowest)), median \(formatDuration(median(busy))) of \(rounds) "
                + "vs idle max \(formatDuration(idle.max() ?? .zero))",
            result: "max \(formatDuration(slowest))",
            target: "target < \(Int(targetMilliseconds)) ms",
            verdict: slowest.milliseconds < targetMilliseconds ? .pass : .miss,
            details: [
                "busy: " + busy.map(formatDuration).joined(separator: ", "),
                "the interrupted calls had all ended at most \(formatDuration(windDown.max() ?? .zero)) after "
                    + "stopSync returned (polled every 2 ms)",
            ])
    }

    /// Saves `count` 1 KiB files with sync off and returns them by id.
    private static func saveFiles(_ device: Device, count: Int) async throws -> [String: Data] {
        var expected: [String: Data] = [:]
        for index in 0..<count {
            let data = content(index: index, size: 1024)
            let attachment = try await device.queue.saveFile(
                data: data, mediaType: "application/octet-stream", fileExtension: "bin")
            expected[attachment.id] = data
        }
        return expected
    }

    /// The project: stopSync timed with `inFlight` uploads parked in the remote. Returns each stopSync's
    /// duration, and how long after it returned the interrupted calls had all ended.
    private static func stopsWhileBusy(inFlight: Int) async throws -> (stops: [Duration], windDowns: [Duration]) {
        try await withWorkFolder("p7-busy") { folder in
            let remote = InMemoryRemoteStorage()
            return try await withDevice(in: folder, remote: remote, maxConcurrentTransfers: inFlight) { device in
                let expected = try await saveFiles(device, count: inFlight)
                await remote.hold()
                var durations: [Duration] = []
                var windDowns: [Duration] = []
                for round in 1...rounds {
                    try await device.queue.startSync()
                    let started: Void? = try await withDeadline(seconds: 10) {
                        await remote.waitForInFlight(count: inFlight)
                    }
                    guard started != nil else {
                        let restarted = await remote.inFlightCount
                        let interrupted =
                            round == 1
                            ? ""
                            : " (the previous stopSync had interrupted them; it took \(formatDuration(durations[round - 2])))"
                        throw BenchmarkFailure(
                            "round \(round): only \(restarted) of the \(inFlight) queued uploads were in flight 10 s "
                                + "after startSync" + interrupted)
                    }
                    let (_, elapsed) = await measure { await device.queue.stopSync() }
                    durations.append(elapsed)
                    windDowns.append(try await measure { try await waitUntilNothingInFlight(remote) }.elapsed)
                    let uploaded = await remote.files.count
                    let queued = try await device.count(in: .queuedUpload)
                    guard uploaded == 0, queued == inFlight else {
                        throw BenchmarkFailure(
                            "after stopSync: \(uploaded) files uploaded and \(queued) queued, expected 0 and \(inFlight)"
                        )
                    }
                }
                await remote.release()
                try await device.queue.startSync()
                try await device.waitForCount(inFlight, in: .synced, seconds: 30)
                try await verifyAllSynced(device, expected: expected, remote: .memory(remote))
                return (durations, windDowns)
            }
        }
    }

    /// The baseline: stopSync timed on a syncing queue with nothing in flight.
    private static func stopsWhileIdle(files: Int) async throws -> [Duration] {
        try await withWorkFolder("p7-idle") { folder in
            let remote = InMemoryRemoteStorage()
            return try await withDevice(in: folder, remote: remote, maxConcurrentTransfers: files) { device in
                let expected = try await saveFiles(device, count: files)
                var durations: [Duration] = []
                for _ in 0..<rounds {
                    try await device.queue.startSync()
                    try await device.waitForCount(files, in: .synced, seconds: 60)
                    try await waitUntilNothingInFlight(remote)
                    let (_, elapsed) = await measure { await device.queue.stopSync() }
                    durations.append(elapsed)
                }
                try await verifyAllSynced(device, expected: expected, remote: .memory(remote))
                return durations
            }
        }
    }

    /// Polls (every 2 ms, outside any timed part) until the remote has no call in flight; the storage
    /// offers no way to wait for that.
    private static func waitUntilNothingInFlight(_ remote: InMemoryRemoteStorage) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(30)
        while await remote.inFlightCount > 0 {
            guard clock.now < deadline else {
                throw BenchmarkFailure("\(await remote.inFlightCount) transfers still in flight 30 s after stopSync")
            }
            try await Task.sleep(for: .milliseconds(2))
        }
    }
}
