import Foundation
import TestSupport

/// P3: the peak resident memory of a process that saves one 1 GiB file from a file URL, uploads it to a
/// folder remote, evicts it and downloads it again, against a process that only writes the same file and
/// copies it with `FileManager`.
///
/// Each side runs in a child process (this executable, re-run with a hidden ``LargeFileChild/command``),
/// so its peak (`VmHWM` on Linux) is its own and not the parent's; both write the file 1 MiB at a time.
/// See ``LargeFileChild`` for what each child does and checks.
enum LargeFileScenario {
    /// The peak to stay under.
    static let targetBytes: Int64 = 64 << 20

    /// Runs P3.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let fileSize: Int64 = size == .full ? 1 << 30 : 128 << 20
        try checkFreeSpace(needed: 3 * fileSize + (256 << 20))
        let baseline = try await withWorkFolder("p3-baseline") { folder in
            try await runChild(mode: "baseline", folder: folder, size: fileSize)
        }
        let project = try await withWorkFolder("p3-project") { folder in
            try await runChild(mode: "project", folder: folder, size: fileSize)
        }
        let percent = Double(project.peak) / Double(fileSize) * 100
        return ScenarioReport(
            title: "\(formatMiB(fileSize)) file saved, uploaded, evicted, downloaded",
            figures: "peak RSS \(formatMiB(project.peak)) vs FileManager copy \(formatMiB(baseline.peak))",
            result: String(format: "%.1f%% of the file", percent),
            target: "target < \(formatMiB(targetBytes))",
            verdict: project.peak < targetBytes ? .pass : .miss,
            details: [
                "project phases: " + project.phases, "baseline phases: " + baseline.phases,
            ])
    }

    /// What a child reported.
    struct ChildResult: Sendable {
        /// Its peak resident set size in bytes.
        var peak: Int64
        /// Its phases and their durations in seconds, as printed (`create=1.234 save=…`).
        var phases: String
    }

    /// Runs this executable as a P3 child and parses its result line.
    private static func runChild(mode: String, folder: WorkFolder, size: Int64) async throws -> ChildResult {
        let fields = try await ChildProcess.runThisExecutable(
            [LargeFileChild.command, mode, folder.url.path, String(size)], resultPrefix: LargeFileChild.resultPrefix,
            what: "P3 \(mode)")
        guard let peakField = fields.first, peakField.hasPrefix("peak="), let peak = Int64(peakField.dropFirst(5))
        else { throw BenchmarkFailure("the P3 \(mode) child printed \(fields.joined(separator: " "))") }
        return ChildResult(peak: peak, phases: fields.dropFirst().joined(separator: " "))
    }

    /// Throws a ``BenchmarkFailure`` when the temporary directory's volume has less than `needed` bytes free.
    private static func checkFreeSpace(needed: Int64) throws {
        let attributes = try FileManager.default.attributesOfFileSystem(
            forPath: FileManager.default.temporaryDirectory.path)
        guard let free = (attributes[.systemFreeSize] as? NSNumber)?.int64Value else { return }
        guard free >= needed else {
            throw BenchmarkFailure(
                "P3 needs \(formatMiB(needed)) free in the temporary directory, has \(formatMiB(free))")
        }
    }
}
