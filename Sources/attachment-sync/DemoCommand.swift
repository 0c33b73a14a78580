import ArgumentParser
import AttachmentSync
import Foundation
import Logging

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

            The command exits with status 0 and prints "demo converged" when every step finished in time \
            and every copy matched. Otherwise it exits with a non-zero status and explains what went wrong.
            """
    )

    /// How many checklist items, and so photos, device A creates.
    @Option(help: "How many checklist items, and photos, device A creates (at least 1).")
    var count = 20

    /// The time the whole demo may take.
    @Option(help: ArgumentHelp("How long the demo may take before it gives up, in seconds.", valueName: "seconds"))
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
        help: ArgumentHelp(
            "Cap each device's uploads and downloads at RATE bytes per second, each direction: a number with an "
                + "optional K, M or G (multiples of 1024), like rclone's --bwlimit (1M, 500K).",
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
        guard count >= 1 else {
            throw ValidationError("--count must be at least 1, not \(count).")
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
        let multipliers: [Character: Double] = ["K": 1024, "M": 1024 * 1024, "G": 1024 * 1024 * 1024]
        var text = bwlimit.trimmingCharacters(in: .whitespaces).uppercased()
        var multiplier = 1.0
        if let last = text.last, let factor = multipliers[last] {
            multiplier = factor
            text.removeLast()
        }
        guard let number = Double(text), number.isFinite, number > 0, number * multiplier >= 1,
            number * multiplier < 1e15
        else {
            throw ValidationError(
                "--bwlimit must be a positive number of bytes per second with an optional K, M or G (1M, 500K), "
                    + "not \(String(reflecting: bwlimit)).")
        }
        return .both(Int64((number * multiplier).rounded()))
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
        let console = DemoConsole()
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
            throw error
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
            outage: outage
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
                console.error("could not remove \(root.path): \(error.localizedDescription)")
            }
        }
        if let failure { throw failure }
    }
}
