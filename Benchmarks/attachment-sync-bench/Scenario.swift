import Foundation

/// How big a run is: the full sizes of the issue, or smaller ones for a smoke run (`--quick`).
enum RunSize: Sendable {
    /// The sizes the targets are stated for.
    case full
    /// Smaller sizes, for a run of about a minute.
    case quick
}

/// Whether a scenario met its performance target. A correctness failure is not a verdict: it is thrown
/// as a ``BenchmarkFailure``.
enum Verdict: String, Sendable {
    /// The target was met.
    case pass = "PASS"
    /// The answer was right but the target was missed.
    case miss = "MISS"
}

/// What one scenario measured, ready to print.
struct ScenarioReport: Sendable {
    /// What was measured and with which sizes, e.g. `500 uploads, 20 ms latency`.
    var title: String
    /// The measured figures of the project and of its baseline.
    var figures: String
    /// The ratio or the figure the target is about, e.g. `7.6× faster`.
    var result: String
    /// The target, e.g. `target ≥ 6×`.
    var target: String
    /// Whether the target was met.
    var verdict: Verdict
    /// Extra lines printed under the scenario's line with `--verbose` (set-up times, breakdowns).
    var details: [String] = []
    /// With a MISS: what the spread of the rounds says about it, printed after the verdict (see
    /// ``RoundRatios/missNote(atMost:)``). Empty when there is nothing to say.
    var missNote: String = ""
}

/// A scenario's correctness check failed (an attachment in the wrong state, wrong bytes, a missing file),
/// or the scenario could not run. The benchmark then exits non-zero.
struct BenchmarkFailure: Error, CustomStringConvertible {
    /// What went wrong.
    var description: String

    /// A failure with the given message.
    init(_ description: String) {
        self.description = description
    }
}

/// One benchmark scenario of issue 4 (P6: issue 6).
struct Scenario: Sendable {
    /// Its short name, as given on the command line (`P1`).
    var name: String
    /// One line for `--help`.
    var summary: String
    /// Runs the project and its baseline, checks the results, and reports.
    var run: @Sendable (RunSize) async throws -> ScenarioReport

    /// Every scenario, in the order a full run runs them: P4 after the scenarios that time file writes,
    /// since deleting its 1,000,000 files slows file creation on ext4 for a while (see README), and P3 last.
    /// P6, P8 and P9 need the local S3 server (`scripts/s3-server start`), `rclone`, `s5cmd` and the AWS CLI;
    /// P6E, P8E and P9E (issue 28: the same with end-to-end encryption, against themselves without) only the
    /// server.
    static let all: [Scenario] = [
        Scenario(
            name: "P1",
            summary: "uploads to a 20 ms remote: maxConcurrentTransfers 8 vs 1 (target ≥ 6× faster)",
            run: ConcurrentUploadsScenario.run),
        Scenario(
            name: "P2",
            summary: "64 KiB saveFiles uploaded to a folder remote vs a plain write+copy loop (target ≤ 1.3×)",
            run: FolderUploadsScenario.run),
        Scenario(
            name: "P12",
            summary: "2,000 × 64 KiB saves, 100 per saveFiles call vs one saveFile each (target ≥ 5× faster)",
            run: BatchSaveScenario.run),
        Scenario(
            name: "P5",
            summary: "saveFile latency with 1,000 transfers in flight (target p99 < 10 ms)",
            run: SaveLatencyScenario.run),
        Scenario(
            name: "P7",
            summary: "stopSync latency with 50 transfers in flight (target < 100 ms)",
            run: StopLatencyScenario.run),
        Scenario(
            name: "P14",
            summary: "20 × 1 MiB up and down a folder remote capped at 4 MB/s each way (target within 10 % of the cap)",
            run: BandwidthCapScenario.run),
        Scenario(
            name: "P15",
            summary: "a download asked for with 1,000 automatic downloads queued on a 50 ms remote vs none queued "
                + "(target ≤ 1.5×)",
            run: OnDemandPriorityScenario.run),
        Scenario(
            name: "P13",
            summary: "CPU per upload to a folder remote with 1,000 vs 100,000 uploads queued (target ≤ 1.2×)",
            run: QueueLengthScenario.run),
        Scenario(
            name: "P10",
            summary: "cold start over 1,000,000 attachments until a first saveFile returns (target ≤ 100 ms)",
            run: ColdStartScenario.run),
        Scenario(
            name: "P19",
            summary: "attachment-sync status over 1,000,000 attachments, from launch to exit (target ≤ 1 s)",
            run: StatusScenario.run),
        Scenario(
            name: "P17",
            summary: "gc over 1,000,000 listed files of a generated remote, 1 % deleted: streaming vs in memory "
                + "(target peak RSS ≤ 64 MiB)",
            run: BucketGCScenario.run),
        Scenario(
            name: "P18",
            summary: "gc of a prefix of 100,000 objects on the local Ceph S3 server vs s5cmd ls and rclone lsf "
                + "(target ≤ 1.25× the faster)",
            run: S3ListingScenario.run),
        Scenario(
            name: "P6",
            summary: "2,000 × 64 KiB uploads to the local Ceph S3 server vs rclone copy and aws s3 sync "
                + "(target not slower than rclone)",
            run: S3UploadsScenario.run),
        Scenario(
            name: "P8",
            summary: "2,000 × 64 KiB downloads from the local Ceph S3 server onto a second device vs rclone copy "
                + "and s5cmd cp (target not slower than the faster)",
            run: S3DownloadsScenario.run),
        Scenario(
            name: "P9",
            summary: "one 1 GiB file up to and down from the local Ceph S3 server vs aws s3 cp and s5cmd cp "
                + "(target not slower than the faster, peak RSS < 64 MiB)",
            run: S3BigFileScenario.run),
        Scenario(
            name: "P6E",
            summary: "P6's queue uploads with end-to-end encryption vs without, same run (target ≤ 1.15×)",
            run: S3EncryptedUploadsScenario.run),
        Scenario(
            name: "P8E",
            summary: "P8's queue downloads with end-to-end encryption vs without, same run (target ≤ 1.15×)",
            run: S3EncryptedDownloadsScenario.run),
        Scenario(
            name: "P9E",
            summary: "P9's 1 GiB up and down with end-to-end encryption vs without, same run (target ≤ 1.15× each "
                + "way, peak RSS < 64 MiB)",
            run: S3EncryptedBigFileScenario.run),
        Scenario(
            name: "P4",
            summary: "a watch emission with one change, reconciled, at 100k and 1M items (target: the queue's share "
                + "≤ 200 ms)",
            run: WatchReconcileScenario.run),
        Scenario(
            name: "P16",
            summary: "peak memory of 4 × 200 MB uploads at once through a three-method adapter vs reading each "
                + "file (target < 64 MiB anonymous)",
            run: MappedUploadsScenario.run),
        Scenario(
            name: "P3",
            summary: "peak RSS of a 1 GiB file saved, uploaded, evicted, downloaded (target < 64 MiB)",
            run: LargeFileScenario.run),
    ]
}
