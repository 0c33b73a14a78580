import Foundation
import TestSupport

/// P16: the peak memory of a process whose queue uploads four 200 MB files at once (`maxConcurrentTransfers`
/// 4) through an adapter that implements only the seed's three `Data` methods, against the same process
/// with the library's former default `uploadFile(fileURL:…)`, which read each file into memory
/// (`Data(contentsOf:)`).
///
/// Each side runs in a child process of its own (``MappedUploadsChild``), so its peaks are its own. The
/// figures are the peak of the anonymous resident memory (`RssAnon`, sampled every 2 ms: what the process
/// itself holds, and about what iOS counts against an app extension's ~120 MB) and the peak resident set
/// (`VmHWM`, which also counts the pages of mapped files, clean and file-backed, that the kernel drops
/// under pressure), both over the upload phase only.
enum MappedUploadsScenario {
    /// The anonymous peak to stay under.
    static let targetBytes: Int64 = 64 << 20
    /// Uploads at once (the default `maxConcurrentTransfers`).
    static let count = 4

    /// Runs P16.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let fileSize: Int64 = size == .full ? 200_000_000 : 32_000_000
        try checkFreeSpace(needed: Int64(count) * fileSize + (256 << 20), what: "P16")
        let baseline = try await withWorkFolder("p16-baseline") { folder in
            try await runChild(mode: "baseline", folder: folder, size: fileSize)
        }
        let project = try await withWorkFolder("p16-project") { folder in
            try await runChild(mode: "project", folder: folder, size: fileSize)
        }
        let ratio = Double(project.anonymous) / Double(baseline.anonymous)
        return ScenarioReport(
            title: "\(count) × \(formatMB(fileSize)) uploaded at once through a three-method adapter",
            figures: "peak anonymous memory \(formatMiB(project.anonymous)) vs \(formatMiB(baseline.anonymous)) "
                + "reading each file; peak RSS \(formatMiB(project.peak)) vs \(formatMiB(baseline.peak))",
            result: "\(formatRatio(ratio)) the anonymous memory",
            target: "target < \(formatMiB(targetBytes))",
            verdict: project.anonymous < targetBytes ? .pass : .miss,
            details: [
                "project: upload phase \(String(format: "%.2f s", project.seconds)), peak file-backed "
                    + formatMiB(project.fileBacked),
                "baseline: upload phase \(String(format: "%.2f s", baseline.seconds)), peak file-backed "
                    + formatMiB(baseline.fileBacked),
                "peaks over the upload phase only (VmHWM reset before it: \(project.resetPeak ? "yes" : "no"))",
            ])
    }

    /// What a child reported.
    struct ChildResult: Sendable {
        /// Peak `VmHWM` in bytes.
        var peak: Int64
        /// Peak sampled `RssAnon` in bytes.
        var anonymous: Int64
        /// Peak sampled `RssFile` in bytes.
        var fileBacked: Int64
        /// The upload phase's wall time.
        var seconds: Double
        /// Whether the peak was reset before the upload phase.
        var resetPeak: Bool
    }

    /// Runs this executable as a P16 child and parses its result line.
    private static func runChild(mode: String, folder: WorkFolder, size: Int64) async throws -> ChildResult {
        let fields = try await ChildProcess.runThisExecutable(
            [MappedUploadsChild.command, mode, folder.url.path, String(size), String(count)],
            resultPrefix: MappedUploadsChild.resultPrefix, what: "P16 \(mode)")
        var values: [String: String] = [:]
        for field in fields {
            let parts = field.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { values[String(parts[0])] = String(parts[1]) }
        }
        guard let peak = values["hwm"].flatMap({ Int64($0) }), let anonymous = values["anon"].flatMap({ Int64($0) }),
            let fileBacked = values["file"].flatMap({ Int64($0) }),
            let seconds = values["seconds"].flatMap({ Double($0) })
        else { throw BenchmarkFailure("the P16 \(mode) child printed \(fields.joined(separator: " "))") }
        return ChildResult(
            peak: peak, anonymous: anonymous, fileBacked: fileBacked, seconds: seconds,
            resetPeak: values["reset"] == "1")
    }

    /// Formats a byte count in decimal megabytes (`200 MB`), as file sizes are usually given.
    private static func formatMB(_ bytes: Int64) -> String {
        String(format: "%g MB", Double(bytes) / 1_000_000)
    }
}

/// Throws a ``BenchmarkFailure`` when the temporary directory's volume has less than `needed` bytes free.
func checkFreeSpace(needed: Int64, what: String) throws {
    let attributes = try FileManager.default.attributesOfFileSystem(
        forPath: FileManager.default.temporaryDirectory.path)
    guard let free = (attributes[.systemFreeSize] as? NSNumber)?.int64Value else { return }
    guard free >= needed else {
        throw BenchmarkFailure(
            "\(what) needs \(formatMiB(needed)) free in the temporary directory, has \(formatMiB(free))")
    }
}
