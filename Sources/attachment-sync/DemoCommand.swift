import ArgumentParser
import AttachmentSync
import Foundation
import Logging

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// `attachment-sync demo`: shows two devices keeping inspection photos in sync through a shared remote
/// folder, with nothing to set up, or through a real S3 bucket with `--s3`.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Sync inspection photos between two simulated devices through a shared folder or S3 bucket.",
        discussion: """
            Runs a small inspection app twice, as devices A and B, in a new temporary folder. Each device \
            has its own SQLite database and attachments folder; both use the same folder as remote storage.

              1. A ticks off the checklist items and saves a generated photo for each one. Its queue \
            uploads them.
              2. The checklist rows are copied to B, standing in for row sync. B's queue sees the photo ids \
            and downloads the files.
              3. A deletes one photo. The queue removes it locally and from the remote.
              4. The cleared photo id reaches B. B archives its copy and keeps the file as a cache.

            Progress is shown per device while it happens. At the end the command prints how many records \
            are in each state and how many bytes are on disk, and compares every copy with its original, \
            byte for byte.

            With --s3 URL the devices share an S3 bucket instead of the folder. The URL is path-style: the \
            server, then the bucket, then optionally a key prefix (http://127.0.0.1:7480/bucket-name). The \
            credentials come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and, for temporary credentials, \
            AWS_SESSION_TOKEN; the region from AWS_REGION (default us-east-1). The bucket is created when it \
            is missing; each run writes under a key prefix of its own (attachment-sync-demo-<random>/), \
            reads the remote copies back through the S3 adapter to compare them, and deletes its objects at \
            the end unless --keep is given.

            With --presigned (and --s3), the devices hold no credentials: every request they make goes to a \
            URL the demo's in-process backend presigns for it (PresignedRemoteStorage on the devices, \
            PresignedURLIssuer on the backend, limited to this run's key prefix), as a shipped app's would.

            With --bwlimit RATE, each device's uploads and downloads are capped at RATE bytes per second in \
            each direction (1M is 1 MiB/s), and the transfer lines show the rate achieved.

            With --outage, B's network goes down (simulated) as the rows reach it: its queue records the \
            downloads and waits, paused for the network, without trying one or spending an attempt; when the \
            network is back the downloads start at once.

            With --on-demand, B's queue downloads nothing by itself: B gets a record per photo (metadata, \
            no content), then fetches the first few on request, showing their progress, and purges one \
            (its content goes, its record stays, the remote copy too). Steps 3 and 4 follow as before.

            --timeout bounds the whole story, capturing the photos included. Ctrl-C (or SIGTERM) stops the \
            demo and cleans up as at the end: the working folder goes and, with --s3, the objects it wrote \
            (unless --keep); a second Ctrl-C quits at once.

            The command exits with status 0 and prints "demo converged" when every step finished in time \
            and every copy matched; 1 when a step did not (the message says which) or a copy differed; 130 \
            after Ctrl-C, 143 after SIGTERM; 64 for bad arguments.
            """
    )

    /// The most photos `--count` accepts: each is 20 to 200 KiB and is kept three times (on A, in the remote,
    /// on B), so 1,000 take about 330 MiB of disk and a minute or so.
    static let maximumCount = 1_000

    /// How many checklist items, and so photos, device A creates.
    @Option(
        parsing: .unconditional,
        help: "How many checklist items, and photos, device A creates (1 to \(Self.maximumCount)).")
    var count = 20

    /// The time the whole demo may take.
    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "How long the whole demo may take before it gives up, in seconds (capturing the photos included).",
            valueName: "seconds"))
    var timeout: Double = 60

    /// The S3 bucket the devices share instead of a folder, as a path-style URL.
    @Option(
        help: ArgumentHelp(
            "Share an S3 bucket instead of a folder: the server, then the bucket, then optionally a key prefix "
                + "(\(DemoS3Location.example)). Credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and "
                + "AWS_SESSION_TOKEN; region from AWS_REGION (default us-east-1).",
            valueName: "url"))
    var s3: String?

    /// The cap on each device's uploads and downloads, as given (`1M`, `500K`, `20000`).
    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "Cap each device's uploads and downloads at RATE bytes per second, each direction: a number with an "
                + "optional K, M or G (multiples of 1024: 1M is 1 MiB/s), like rclone's --bwlimit (1M, 500K).",
            valueName: "rate"))
    var bwlimit: String?

    /// Whether B's network goes down while the rows reach it.
    @Flag(
        help: ArgumentHelp(
            "Simulate an outage: B's network goes down as the rows reach it; its queue waits without trying, "
                + "then downloads at once when the network is back."))
    var outage = false

    /// Whether the devices go through presigned URLs from an in-process backend.
    @Flag(
        help: ArgumentHelp(
            "With --s3: the devices hold no credentials and get a presigned URL for each request from the "
                + "demo's in-process backend."))
    var presigned = false

    /// Whether device B fetches photos only on request.
    @Flag(
        help: ArgumentHelp(
            "Device B receives the records only, then fetches a few photos on request, with progress, and "
                + "purges one."))
    var onDemand = false

    /// Whether to keep the working folder.
    @Flag(
        help: ArgumentHelp(
            "Keep the temporary folder (databases, attachment folders, remote) to look at afterwards, and with "
                + "--s3 the objects in the bucket."))
    var keep = false

    /// Whether the library logs to standard error.
    @Flag(help: "Write the library's debug log to standard error.")
    var verbose = false

    func validate() throws {
        guard (1...Self.maximumCount).contains(count) else {
            throw ValidationError(
                "--count must be between 1 and \(Self.maximumCount), not \(count) (each photo is 20 to 200 KiB, "
                    + "kept on A, in the remote and on B).")
        }
        guard timeout.isFinite, timeout > 0 else {
            throw ValidationError("--timeout must be a positive number of seconds, not \(timeout).")
        }
        _ = try s3Location()
        _ = try bandwidthLimit()
        guard !(outage && onDemand) else {
            throw ValidationError("--outage shows B's eager downloads waiting for the network; leave out --on-demand.")
        }
        guard !presigned || s3 != nil else {
            throw ValidationError("--presigned needs --s3: the presigned URLs are for an S3 bucket.")
        }
    }

    /// The caps `--bwlimit` gives, or `nil` without it.
    ///
    /// - Throws: `ValidationError` for a rate that is not a positive number with an optional K, M or G.
    func bandwidthLimit() throws -> BandwidthLimit? {
        guard let bwlimit else { return nil }
        guard let bytes = ByteCount.parse(bwlimit), bytes >= 1 else {
            throw ValidationError(
                "--bwlimit must be a positive number of bytes per second, \(ByteCount.syntax), "
                    + "not \(String(reflecting: bwlimit)).")
        }
        return .both(bytes)
    }

    /// The bucket `--s3` names, or `nil` without `--s3`.
    ///
    /// - Throws: `ValidationError` for a malformed URL or missing credentials.
    func s3Location() throws -> DemoS3Location? {
        try s3.map { try DemoS3Location(url: $0, environment: ProcessInfo.processInfo.environment) }
    }

    /// The remote the devices share: the bucket `--s3` names, under a key prefix of this run's own, or a
    /// folder in `root`.
    private func makeRemote(root: URL, logger: Logger?) throws -> any DemoRemote {
        guard let location = try s3Location() else {
            return DemoFolderRemote(directory: root.appendingPathComponent("remote", isDirectory: true))
        }
        return try DemoS3Remote(
            location: location, runPrefix: "attachment-sync-demo-\(UUID().uuidString.prefix(8).lowercased())/",
            stateDirectory: root.appendingPathComponent("s3-multipart-uploads", isDirectory: true),
            presigned: presigned, logger: logger)
    }

    func run() async throws {
        let control = DemoControl()
        // With SIGPIPE ignored (DemoSignals), a closed output is a failed write: the demo stops and cleans up.
        let console = DemoConsole(onOutputClosed: { control.stop(.signal(SIGPIPE)) })
        let signals = DemoSignals(control: control)
        defer { signals.cancel() }
        let root = FileManager.default.temporaryDirectory
            .appendingPathComponent("attachment-sync-demo-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)

        var logger: Logger?
        if verbose {
            var streamLogger = Logger(label: "AttachmentSync") { StreamLogHandler.standardError(label: $0) }
            streamLogger.logLevel = .debug
            logger = streamLogger
        }
        let remote: any DemoRemote
        do {
            remote = try makeRemote(root: root, logger: logger)
        } catch {
            try? FileManager.default.removeItem(at: root)
            console.error("attachment-sync demo: \(ErrorText.describe(error))")
            throw ExitCode(1)
        }
        let scenario = DemoScenario(
            count: count,
            onDemand: onDemand,
            timeout: .clampedMilliseconds(Int64(clamping: (timeout * 1000).rounded())),
            root: root,
            remote: remote,
            keep: keep,
            console: console,
            logger: logger,
            bandwidthLimit: try bandwidthLimit(),
            outage: outage,
            control: control
        )

        var failure: (any Error)?
        do {
            try await scenario.run()
        } catch {
            failure = error
        }
        if keep {
            console.line("kept \(root.path)")
        } else {
            do {
                try FileManager.default.removeItem(at: root)
                console.line("removed \(root.path) (pass --keep to keep it)")
            } catch {
                console.error("could not remove \(root.path): \(ErrorText.describe(error))")
            }
        }
        if case .signal(let number) = control.reason {
            console.error("attachment-sync demo: stopped by \(DemoControl.name(of: number)), cleaned up")
            throw ExitCode(128 + number)
        }
        if let failure {
            console.error("attachment-sync demo: \(ErrorText.describe(failure))")
            throw ExitCode(1)
        }
    }
}
