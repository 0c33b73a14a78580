import AttachmentSync
import AttachmentSyncTesting
import Foundation

/// P5: how long one `saveFile(data:…)` takes while 1,000 slow uploads are in flight, against the same
/// call with nothing in flight.
///
/// The slow uploads: 1,000 files saved with sync off, then the ``InMemoryRemoteStorage`` is held
/// (``InMemoryRemoteStorage/hold()``: every call parks until released) and sync starts with
/// `maxConcurrentTransfers` 1,000, so all 1,000 uploads start and stay in flight. Then 1,000 more 4 KiB
/// files are saved one after the other, each call timed; sync stays on, so each save also triggers the
/// queue's passes (throttled to 10 ms). Afterwards the remote is released and every attachment, the slow
/// ones and the timed ones, must end up synced with the right bytes.
///
/// For reference, the disk's own floor is measured too and printed with `--verbose`: before each timed
/// save, a 4 KiB file written, flushed and renamed with plain system calls.
///
/// Baseline: the same 1,000 timed saves on a fresh queue with sync off (nothing in flight, no background
/// pass), then uploaded (sync on) and checked the same way.
enum SaveLatencyScenario {
    /// The size of each timed file.
    static let fileSize = 4 * 1024
    /// The p99 to stay under.
    static let targetMilliseconds = 10.0

    /// Runs P5.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let inFlight = size == .full ? 1000 : 100
        let saves = size == .full ? 1000 : 200
        let idle = try await idleSaves(count: saves)
        let (busy, busySetup) = try await savesWhileBusy(inFlight: inFlight, count: saves)
        let p99 = percentile(busy.saves, 0.99)
        let summary = { (samples: [Duration]) in
            "p50 \(formatDuration(median(samples))), p99 \(formatDuration(percentile(samples, 0.99))), "
                + "max \(formatDuration(samples.max() ?? .zero))"
        }
        return ScenarioReport(
            title: "saveFile with \(formatCount(inFlight)) transfers in flight",
            figures: "p50 \(formatDuration(median(busy.saves))), p99 \(formatDuration(p99)) "
                + "vs idle p50 \(formatDuration(median(idle.saves))), p99 \(formatDuration(percentile(idle.saves, 0.99)))",
            result: String(format: "p99 %.2f× idle", p99.seconds / percentile(idle.saves, 0.99).seconds),
            target: "target p99 < \(Int(targetMilliseconds)) ms",
            verdict: p99.milliseconds < targetMilliseconds ? .pass : .miss,
            details: [
                "\(saves) timed saves of 4 KiB; \(inFlight) uploads were put in flight in \(formatDuration(busySetup))",
                "busy: saveFile \(summary(busy.saves)); the disk's floor (4 KiB write + fsync + rename, interleaved) "
                    + summary(busy.floor),
                "idle: saveFile \(summary(idle.saves)); the disk's floor " + summary(idle.floor),
            ])
    }

    /// The timings of one phase.
    struct Phase: Sendable {
        /// Each `saveFile` call.
        var saves: [Duration] = []
        /// Each plain durable write made just before it (see ``timedSaves(_:count:floor:)``).
        var floor: [Duration] = []
        /// The saved attachments' contents, by id.
        var expected: [String: Data] = [:]
    }

    /// Saves `count` files, timing each call. Before each, for comparison, times what one durable file
    /// write costs on this disk at that moment: a 4 KiB file written to a temporary name in `floor`, flushed
    /// (`fsync`) and renamed into place, the least `saveFile` must do. Interleaving the two keeps the disk's
    /// state (its write-back, its journal) the same for both.
    private static func timedSaves(_ device: Device, count: Int, floor: WorkFolder) async throws -> Phase {
        var phase = Phase()
        for index in 0..<count {
            let data = content(index: index, size: fileSize)
            let temporary = floor.path(".tmp-\(index)")
            let (_, floorTime) = try measureSync {
                try writeDurably(data, to: temporary)
                try renameFile(temporary, to: floor.path("\(index).bin"))
            }
            phase.floor.append(floorTime)
            let (attachment, elapsed) = try await measure {
                try await device.queue.saveFile(data: data, mediaType: "application/octet-stream", fileExtension: "bin")
            }
            phase.saves.append(elapsed)
            phase.expected[attachment.id] = data
        }
        return phase
    }

    /// The baseline: timed saves with sync off, then uploaded and checked.
    private static func idleSaves(count: Int) async throws -> Phase {
        try await withWorkFolder("p5-idle") { folder in
            let remote = InMemoryRemoteStorage()
            let floor = WorkFolder(existing: try folder.makeFolder("floor"))
            return try await withDevice(in: folder, remote: remote) { device in
                try await device.queue.waitForInit()
                let phase = try await timedSaves(device, count: count, floor: floor)
                try await device.queue.startSync()
                try await device.waitForCount(count, in: .synced, seconds: 120)
                try await verifyAllSynced(device, expected: phase.expected, remote: .memory(remote))
                return phase
            }
        }
    }

    /// The project: timed saves while `inFlight` uploads are parked in the remote, then released and checked.
    private static func savesWhileBusy(inFlight: Int, count: Int) async throws -> (Phase, Duration) {
        try await withWorkFolder("p5-busy") { folder in
            let remote = InMemoryRemoteStorage()
            let floor = WorkFolder(existing: try folder.makeFolder("floor"))
            return try await withDevice(in: folder, remote: remote, maxConcurrentTransfers: inFlight) { device in
                var expected: [String: Data] = [:]
                for index in 0..<inFlight {
                    let data = content(index: 1_000_000 + index, size: 1024)
                    let attachment = try await device.queue.saveFile(
                        data: data, mediaType: "application/octet-stream", fileExtension: "bin")
                    expected[attachment.id] = data
                }
                await remote.hold()
                let (_, setup) = try await measure {
                    try await device.queue.startSync()
                    let reached: Void? = try await withDeadline(seconds: 120) {
                        await remote.waitForInFlight(count: inFlight)
                    }
                    guard reached != nil else {
                        throw BenchmarkFailure("\(inFlight) uploads were not in flight within 120 s")
                    }
                }
                let phase = try await timedSaves(device, count: count, floor: floor)
                let stillInFlight = await remote.inFlightCount
                guard stillInFlight == inFlight else {
                    throw BenchmarkFailure("\(stillInFlight) uploads in flight after the timed saves, not \(inFlight)")
                }
                expected.merge(phase.expected) { first, _ in first }
                await remote.release()
                try await device.waitForCount(expected.count, in: .synced, seconds: 300)
                try await verifyAllSynced(device, expected: expected, remote: .memory(remote))
                return (phase, setup)
            }
        }
    }
}
