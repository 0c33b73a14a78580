import AttachmentSync
import AttachmentSyncS3
import Crypto
import Foundation
import TestSupport

/// P9E (issue 28): P9's adapter side with end-to-end encryption on, against the same adapter without it in
/// the same run. One 1 GiB file (16 MiB with `--quick`, a smoke run) uploaded and downloaded by
/// ``S3RemoteStorage`` (plain) or by `EncryptedRemoteStorage(wrapping:)` around it (encrypted), each
/// direction in a child process of its own (``S3EncryptedBigFileChild``), so its peak RSS is its own.
///
/// The attachment given to the adapter carries the content's SHA-256, as a record the queue saved does (so
/// neither side hashes the file again before uploading). Each side uploads the file to its own key: a
/// plain object must start with the file's first bytes, an encrypted one with `ASE`, and be larger than
/// the file; then it downloads that object to a fresh file, compared byte for byte with the original. The
/// figures are the children's own timings of the transfer (process start-up left out: there is no tool to
/// compare with here) and their CPU time over it, per MiB of content. The sides take turns twice (once with
/// `--quick`), plain first in even rounds; the medians are compared per direction.
enum S3EncryptedBigFileScenario {
    /// The most either side's process may hold at its peak, as in P9.
    static let peakLimit = S3BigFileScenario.peakLimit
    /// The run's key, in the work folder, for the children.
    static let keyFile = "p9e.key"

    /// What one child measured.
    struct ChildResult: Sendable {
        var sample: TimedSample
        var peak: Int64
        /// The most disk the files it made took at once.
        var disk: Int64
    }

    /// Runs P9E.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let bytes: Int64 = size == .full ? 1 << 30 : 16 << 20
        let rounds = size == .full ? 2 : 1
        let server = try S3Server.fromEnvironment()
        return try await withWorkFolder("p9e") { folder in
            let source = folder.file("source.bin")
            try BigFile.create(at: source, size: bytes)
            let sha256 = contentSHA256(size: bytes)
            let key = SymmetricKey(size: .bits256)
            try key.withUnsafeBytes { Data($0) }.write(to: folder.file(keyFile))
            return try await S3Bucket.withNew(server: server, label: "p9e", folder: folder) { bucket in
                var up: [Encryption: [TimedSample]] = [:]
                var down: [Encryption: [TimedSample]] = [:]
                var peaks: [Encryption: Int64] = [:]
                var disks: [String: Int64] = [:]
                for round in 0..<rounds {
                    for side in Encryption.order(round: round) {
                        let object = "p9e-\(round)-\(side.rawValue)-\(UUID().uuidString.lowercased().prefix(8)).bin"
                        let copy = folder.file("copy.bin")
                        let arguments = [folder.url.path, bucket.name, object, String(bytes), sha256]
                        let sent = try await child(["up", side.rawValue] + arguments)
                        try await checkObject(object, side: side, bucket: bucket, source: source, bytes: bytes)
                        let fetched = try await child(["down", side.rawValue] + arguments)
                        try BigFile.verify(at: copy, size: bytes, what: "the \(side.rawValue) download")
                        try FileManager.default.removeItem(at: copy)
                        try await bucket.delete(keys: [object])
                        up[side, default: []].append(sent.sample)
                        down[side, default: []].append(fetched.sample)
                        peaks[side] = max(peaks[side] ?? 0, sent.peak, fetched.peak)
                        disks["up \(side.rawValue)"] = max(disks["up \(side.rawValue)"] ?? 0, sent.disk)
                        disks["down \(side.rawValue)"] = max(disks["down \(side.rawValue)"] ?? 0, fetched.disk)
                    }
                }
                return report(bytes: bytes, rounds: rounds, up: up, down: down, peaks: peaks, disks: disks)
            }
        }
    }

    /// The SHA-256 (lowercase hex) of the content ``BigFile/create(at:size:)`` writes, one chunk at a time.
    private static func contentSHA256(size: Int64) -> String {
        var hasher = SHA256()
        var index = 0
        while Int64(index) * Int64(BigFile.chunkSize) < size {
            hasher.update(data: BigFile.chunk(index, size: size))
            index += 1
        }
        return hasher.finalize().map { String(format: "%02x", $0) }.joined()
    }

    /// The object must be larger than the file when encrypted (the same size when plain) and start with the
    /// format's magic when encrypted, with the file's first bytes when plain.
    private static func checkObject(
        _ object: String, side: Encryption, bucket: S3Bucket, source: URL, bytes: Int64
    ) async throws {
        guard let listed = try await bucket.list(prefix: object)[object] else {
            throw BenchmarkFailure("\(side.rawValue): \(object) is not in the bucket after the upload")
        }
        let start = try await bucket.firstBytes(of: object, count: 16)
        let contentStart = BigFile.chunk(0, size: bytes).prefix(16)
        switch side {
        case .plain:
            guard listed.size == bytes, start == contentStart else {
                throw BenchmarkFailure("plain: \(object) has \(listed.size) bytes and does not start as the file")
            }
        case .encrypted:
            guard listed.size > bytes, start.starts(with: EncryptionComparison.magic), start != contentStart else {
                throw BenchmarkFailure(
                    "encrypted: \(object) has \(listed.size) bytes and starts with \(Array(start.prefix(3))), "
                        + "not ciphertext (ASE)")
            }
        }
    }

    private static func report(
        bytes: Int64, rounds: Int, up: [Encryption: [TimedSample]], down: [Encryption: [TimedSample]],
        peaks: [Encryption: Int64], disks: [String: Int64]
    ) -> ScenarioReport {
        let upward = EncryptionComparison.Comparison(up)
        let downward = EncryptionComparison.Comparison(down)
        let target = EncryptionComparison.targetRatio
        let encryptedPeak = peaks[.encrypted] ?? 0
        let met = upward.met && downward.met && encryptedPeak < peakLimit
        let notes =
            met
            ? []
            : [("up", upward.rounds), ("down", downward.rounds)].compactMap { direction, ratios in
                let note = ratios.missNote(atMost: target)
                return note.isEmpty ? nil : "\(direction): \(note)"
            } + (encryptedPeak < peakLimit ? [] : ["encrypted peak RSS over the limit"])
        func rate(_ duration: Duration) -> String {
            String(format: "%.0f MB/s", Double(bytes) / duration.seconds / 1e6)
        }
        return ScenarioReport(
            title: "one \(formatMiB(bytes)) file up to and down from Ceph S3 by the adapter, encrypted vs plain",
            figures: "up: \(upward.times), \(upward.cpu(bytes: bytes)); down: \(downward.times), "
                + "\(downward.cpu(bytes: bytes))\(rounds > 1 ? " (medians of \(rounds))" : ""); peak RSS plain "
                + "\(formatMiB(peaks[.plain] ?? 0)), encrypted \(formatMiB(encryptedPeak))",
            result: "encrypted up \(upward.result), down \(downward.result)",
            target: "target ≤ \(formatRatio(target)) plain each way, peak RSS < \(formatMiB(peakLimit))",
            verdict: met ? .pass : .miss,
            details: [
                "rates: up plain \(rate(upward.plainTime)), encrypted \(rate(upward.encryptedTime)); down plain "
                    + "\(rate(downward.plainTime)), encrypted \(rate(downward.encryptedTime))",
                "rounds: up \(upward.roundsDetail); down \(downward.roundsDetail)",
                "most disk taken at once besides the source file (the download's copy included), as a share of the "
                    + "file: "
                    + ["up plain", "up encrypted", "down plain", "down encrypted"].map {
                        "\($0) \(formatMiB(disks[$0] ?? 0)) (\(formatRatio(Double(disks[$0] ?? 0) / Double(bytes))))"
                    }.joined(separator: ", "),
                "each object checked (size; ASE or the file's first bytes), each download compared byte for byte",
            ],
            missNote: notes.joined(separator: "; "))
    }

    /// Runs one side of one direction in a child process; returns what it measured.
    private static func child(_ arguments: [String]) async throws -> ChildResult {
        let what = "P9E \(arguments.prefix(2).joined(separator: " "))"
        let fields = try await ChildProcess.runThisExecutable(
            [S3EncryptedBigFileChild.command] + arguments, resultPrefix: S3EncryptedBigFileChild.resultPrefix,
            what: what)
        let values = ChildProcess.namedValues(fields)
        guard let peak = values["peak"].flatMap({ Int64($0) }), let seconds = values["seconds"].flatMap({ Double($0) }),
            let cpu = values["cpu"].flatMap({ Double($0) }), let disk = values["disk"].flatMap({ Int64($0) })
        else {
            throw BenchmarkFailure("the \(what) child printed \(fields.joined(separator: " "))")
        }
        return ChildResult(
            sample: TimedSample(elapsed: .nanoseconds(Int64(seconds * 1e9)), cpu: .nanoseconds(Int64(cpu * 1e9))),
            peak: peak, disk: disk)
    }
}

/// The P9E child (`attachment-sync-bench __p9e-child up|down plain|encrypted <folder> <bucket> <key> <bytes>
/// <sha256>`): uploads `<folder>/source.bin` as `key`, or downloads `key` to `<folder>/copy.bin`, with
/// ``S3RemoteStorage`` alone (plain) or wrapped in `EncryptedRemoteStorage` with the key of
/// `<folder>/p9e.key` (encrypted), on the server of the `ATTACHMENT_SYNC_S3_*` variables, and prints
/// `P9E-RESULT peak=<bytes> seconds=<s> cpu=<s> disk=<bytes>` (the transfer's time, this process's CPU time
/// over it, and the most disk space the files it made in `<folder>` took at once).
enum S3EncryptedBigFileChild {
    static let command = "__p9e-child"
    static let resultPrefix = "P9E-RESULT"

    static func main(_ arguments: [String]) async -> Int32 {
        guard arguments.count == 7, ["up", "down"].contains(arguments[0]),
            let side = Encryption(rawValue: arguments[1]), let size = Int64(arguments[5])
        else {
            printError(
                "usage: attachment-sync-bench \(command) up|down plain|encrypted <folder> <bucket> <key> <bytes> <sha256>"
            )
            return 2
        }
        let (mode, folder, bucket, key, sha256) = (
            arguments[0], URL(fileURLWithPath: arguments[2]), arguments[3], arguments[4], arguments[6]
        )
        do {
            let server = try S3Server.fromEnvironment()
            let state = folder.appendingPathComponent("multipart-state-\(UUID().uuidString)")
            let storage = try server.storage(bucket: bucket, keyPrefix: "", stateDirectory: state)
            let secret = SymmetricKey(
                data: try Data(contentsOf: folder.appendingPathComponent(S3EncryptedBigFileScenario.keyFile)))
            let remote = EncryptionComparison.remote(storage, side, key: secret)
            let elapsed: Duration
            let cpu: Duration
            let disk = DiskSampler(folder: folder, leaving: ["source.bin", S3EncryptedBigFileScenario.keyFile])
            let cpuBefore = CPUTime.used()
            do {
                (_, elapsed) = try await measure {
                    if mode == "up" {
                        try await remote.uploadFile(
                            fileURL: folder.appendingPathComponent("source.bin"),
                            attachment: Attachment(
                                id: String(key.dropLast(4)), filename: key, state: .queuedUpload, size: size,
                                contentHash: sha256)
                        ) { _ in }
                    } else {
                        _ = try await remote.downloadFile(
                            attachment: Attachment(
                                id: String(key.dropLast(4)), filename: key, state: .queuedDownload, size: size),
                            into: folder.appendingPathComponent("copy.bin"), from: 0
                        ) { _ in }
                    }
                }
                cpu = CPUTime.used() - cpuBefore
                await disk.stop()
                try await storage.shutdown()
            } catch {
                try? await storage.shutdown()
                throw error
            }
            guard let peak = Memory.peakResidentBytes() else {
                printError("cannot read the peak resident set size")
                return 1
            }
            print(
                "\(resultPrefix) peak=\(peak) seconds=\(String(format: "%.3f", elapsed.seconds)) "
                    + "cpu=\(String(format: "%.3f", cpu.seconds)) disk=\(disk.peak)")
            return 0
        } catch {
            printError("P9E \(mode) \(side.rawValue) failed: \(error)")
            return 1
        }
    }
}

/// The most disk space (allocated blocks, not sizes: a file with holes counts what it holds) the regular files
/// of a folder took at once, sampled every 10 ms from its creation until ``stop()``, leaving out some names.
/// A benchmark child's measure, so it samples on the wall clock.
final class DiskSampler: Sendable {
    private let highest = LockedValue<Int64>(0)
    private let sampling = LockedValue<Task<Void, Never>?>(nil)

    init(folder: URL, leaving left: Set<String>) {
        let highest = self.highest
        let task = Task.detached {
            while !Task.isCancelled {
                let total = Self.allocated(in: folder, leaving: left)
                highest.withLock { $0 = max($0, total) }
                try? await Task.sleep(for: .milliseconds(10))
            }
            let last = Self.allocated(in: folder, leaving: left)
            highest.withLock { $0 = max($0, last) }
        }
        sampling.withLock { $0 = task }
    }

    /// The most the files took in any sample so far.
    var peak: Int64 { highest.withLock { $0 } }

    /// Ends the sampling after one last sample.
    func stop() async {
        guard let task = sampling.withLock({ $0 }) else { return }
        task.cancel()
        await task.value
    }

    static func allocated(in folder: URL, leaving left: Set<String>) -> Int64 {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        var total: Int64 = 0
        for name in names where !left.contains(name) {
            var status = stat()
            guard lstat(folder.appendingPathComponent(name).path, &status) == 0,
                status.st_mode & S_IFMT == S_IFREG
            else { continue }
            total += Int64(status.st_blocks) * 512
        }
        return total
    }
}
