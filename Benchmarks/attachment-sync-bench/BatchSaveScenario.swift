import AttachmentSync
import AttachmentSyncTesting
import Foundation

/// P12: an import. 2,000 (200) files of 64 KiB saved with `saveFiles`, 100 per call, against the same files
/// saved with one `saveFile(data:…)` call each; sync stays off, so only the saves are timed (each side on a
/// fresh queue and folder). The sides take turns three times (once with `--quick`); the medians are
/// compared. Checked afterwards: every record is a queued upload of the right size and its file holds the
/// right bytes.
enum BatchSaveScenario {
    /// The size of each file.
    static let fileSize = 64 * 1024
    /// Items per `saveFiles` call.
    static let batchSize = 100
    /// How many times faster the batches must be.
    static let target = 5.0

    /// Runs P12.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let count = size == .full ? 2000 : 200
        let files = (0..<count).map { content(index: $0, size: fileSize) }
        var singles: [Duration] = []
        var batches: [Duration] = []
        for _ in 0..<(size == .full ? 3 : 1) {
            singles.append(try await save(files, batched: false))
            batches.append(try await save(files, batched: true))
        }
        let single = median(singles)
        let batch = median(batches)
        let speedup = single.seconds / batch.seconds
        return ScenarioReport(
            title: "\(formatCount(count)) × 64 KiB saves, \(batchSize) per saveFiles call vs one saveFile each",
            figures: "saveFiles \(formatDuration(batch)) vs saveFile \(formatDuration(single))"
                + (batches.count > 1 ? " (medians of \(batches.count))" : ""),
            result: "\(formatRatio(speedup)) faster",
            target: "target ≥ \(formatRatio(target))",
            verdict: speedup >= target ? .pass : .miss,
            details: [
                String(
                    format: "per file: saveFiles %.3f ms, saveFile %.3f ms", batch.milliseconds / Double(count),
                    single.milliseconds / Double(count)),
                "rounds: saveFiles " + batches.map(formatDuration).joined(separator: ", ") + "; saveFile "
                    + singles.map(formatDuration).joined(separator: ", "),
            ])
    }

    private static func save(_ files: [Data], batched: Bool) async throws -> Duration {
        try await withWorkFolder("p12") { folder in
            try await withDevice(in: folder, remote: InMemoryRemoteStorage()) { device in
                try await device.queue.waitForInit()
                let (ids, elapsed) = try await measure {
                    var ids: [String] = []
                    if batched {
                        for start in stride(from: 0, to: files.count, by: batchSize) {
                            let items = files[start..<min(start + batchSize, files.count)].map {
                                AttachmentQueue.NewFile(
                                    data: $0, mediaType: "application/octet-stream", fileExtension: "bin")
                            }
                            ids += try await device.queue.saveFiles(items).map(\.id)
                        }
                    } else {
                        for data in files {
                            ids.append(
                                try await device.queue.saveFile(
                                    data: data, mediaType: "application/octet-stream", fileExtension: "bin"
                                ).id)
                        }
                    }
                    return ids
                }
                for (id, data) in zip(ids, files) {
                    guard let attachment = try await device.queue.attachment(id: id),
                        attachment.state == .queuedUpload, attachment.size == Int64(data.count),
                        let path = attachment.localUri, FileManager.default.contents(atPath: path) == data
                    else { throw BenchmarkFailure("attachment \(id) was not saved with its bytes") }
                }
                guard ids.count == files.count, try await device.count(in: .queuedUpload) == files.count else {
                    throw BenchmarkFailure("expected \(files.count) queued uploads")
                }
                return elapsed
            }
        }
    }
}
