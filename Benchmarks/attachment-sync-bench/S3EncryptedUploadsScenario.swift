import AttachmentSync
import AttachmentSyncS3
import Crypto
import Foundation

/// P6E (issue 28): P6's queue side with end-to-end encryption on, against the same queue without it in the
/// same run. 2,000 files of 64 KiB (50 with `--quick`, a smoke run), saved with sync off (not timed), then
/// one `syncNow()` (timed) to a fresh prefix of a bucket of the local Ceph S3 gateway,
/// `maxConcurrentTransfers` 16, through ``S3RemoteStorage`` (plain) or `EncryptedRemoteStorage(wrapping:)`
/// around it (encrypted).
///
/// Each side is checked afterwards: every record is synced with the content's size; the prefix lists exactly
/// the expected keys; plain objects are the content (size, ETag = MD5, 20 compared byte for byte); encrypted
/// objects are ciphertext (every one downloaded as stored starts with `ASE` and is not the content, none has
/// the content's MD5 as its ETag) and 20 of them decrypt to the content byte for byte. The prefix is then
/// emptied. The sides take turns three times (once with `--quick`), plain first in even rounds; the medians
/// are compared, and the client CPU of the `syncNow()` is given per MiB of content.
enum S3EncryptedUploadsScenario {
    /// The size of each file, as in P6.
    static let fileSize = S3UploadsScenario.fileSize
    /// The queue's `maxConcurrentTransfers`, as in P6.
    static let concurrency = S3UploadsScenario.concurrency
    /// Files per `saveFiles` call in the (untimed) saves.
    static let batchSize = 100
    /// Objects decrypted (or, plain, downloaded) and compared per side.
    static let sampleSize = 20

    /// Everything the sides share.
    struct Context: Sendable {
        var server: S3Server
        var bucket: S3Bucket
        /// The folder of files to upload.
        var source: URL
        /// The files' names, in order.
        var names: [String]
        /// The files' bytes, by name.
        var files: [String: Data]
        /// The files' MD5s (lowercase hex), by name.
        var md5s: [String: String]
        /// The run's key.
        var key: SymmetricKey
    }

    /// Runs P6E.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let count = size == .full ? 2000 : 50
        let rounds = size == .full ? 3 : 1
        let server = try S3Server.fromEnvironment()
        return try await withWorkFolder("p6e") { folder in
            let source = try folder.makeFolder("files")
            var names: [String] = []
            var files: [String: Data] = [:]
            var md5s: [String: String] = [:]
            for index in 0..<count {
                let name = String(format: "file-%05d.bin", index)
                let data = content(index: 800_000 + index, size: fileSize)
                try data.write(to: source.appendingPathComponent(name))
                names.append(name)
                files[name] = data
                md5s[name] = Insecure.MD5.hash(data: data).map { String(format: "%02x", $0) }.joined()
            }
            return try await S3Bucket.withNew(server: server, label: "p6e", folder: folder) { bucket in
                let context = Context(
                    server: server, bucket: bucket, source: source, names: names, files: files, md5s: md5s,
                    key: SymmetricKey(size: .bits256))
                try await warmUp(context)
                var samples: [Encryption: [TimedSample]] = [:]
                for round in 0..<rounds {
                    for side in Encryption.order(round: round) {
                        samples[side, default: []].append(try await upload(side, round: round, context))
                    }
                }
                return EncryptionComparison.report(
                    title: "\(formatCount(count)) × 64 KiB uploads to Ceph S3 by the queue, encrypted vs plain",
                    samples, bytes: Int64(count * fileSize), rounds: rounds,
                    details: [
                        "each side checked: \(formatCount(count)) records synced, \(formatCount(count)) objects "
                            + "listed; plain: size and ETag = MD5, \(sampleSize) compared; encrypted: every object "
                            + "starts with ASE and is not the content, \(sampleSize) decrypted and compared"
                    ])
            }
        }
    }

    /// Not timed: uploads the first 200 files and deletes them, so that the first side timed does not pay for
    /// the new bucket's first writes.
    private static func warmUp(_ context: Context) async throws {
        let prefix = "p6e-warmup/"
        let names = Array(context.names.prefix(200))
        try await context.bucket.put(
            names.map { (name: $0, data: context.files[$0] ?? Data()) }, prefix: prefix, concurrency: concurrency)
        try await context.bucket.delete(keys: names.map { prefix + $0 })
    }

    /// One side: a fresh queue saves every file (not timed) and uploads them with one `syncNow()` (timed) to a
    /// fresh prefix; the records and the objects are checked, and the prefix emptied.
    private static func upload(_ side: Encryption, round: Int, _ context: Context) async throws -> TimedSample {
        let prefix = "p6e-\(round)-\(side.rawValue)-\(UUID().uuidString.lowercased().prefix(8))/"
        return try await withWorkFolder("p6e-queue") { folder in
            let (sample, saved) = try await context.server.withStorage(
                bucket: context.bucket.name, keyPrefix: prefix, folder: folder
            ) { storage in
                let remote = EncryptionComparison.remote(storage, side, key: context.key)
                return try await withDevice(in: folder, remote: remote, maxConcurrentTransfers: concurrency) {
                    device in
                    try await saveAndSync(context, device: device)
                }
            }
            var expected: [String: Attachment] = [:]
            for (attachment, name) in zip(saved, context.names) { expected[name] = attachment }
            try await verify(side, prefix: prefix, expected: expected, context)
            try await context.bucket.delete(keys: saved.map { prefix + $0.filename })
            return sample
        }
    }

    /// Saves every file in batches with sync off, then times one `syncNow()` and its CPU; checks that every
    /// record is synced with the content's size. Returns the sample and the records, in the files' order.
    private static func saveAndSync(_ context: Context, device: Device) async throws -> (TimedSample, [Attachment]) {
        var saved: [Attachment] = []
        for start in stride(from: 0, to: context.names.count, by: batchSize) {
            let batch = context.names[start..<min(start + batchSize, context.names.count)]
            saved += try await device.queue.saveFiles(
                batch.map {
                    AttachmentQueue.NewFile(
                        fileURL: context.source.appendingPathComponent($0), mediaType: "application/octet-stream",
                        fileExtension: "bin")
                })
        }
        let cpuBefore = CPUTime.used()
        let (_, elapsed) = try await measure { try await device.queue.syncNow() }
        let cpu = CPUTime.used() - cpuBefore
        let count = context.names.count
        let good = try await device.db.get(
            sql: "SELECT count(*) AS n FROM attachments WHERE state = ? AND has_synced = 1 AND size = ?",
            parameters: [AttachmentState.synced.rawValue, fileSize]
        ) { try $0.getInt(name: "n") }
        let all = try await device.db.get(sql: "SELECT count(*) AS n FROM attachments", parameters: []) {
            try $0.getInt(name: "n")
        }
        guard good == count, all == count, saved.count == count else {
            throw BenchmarkFailure(
                "the queue has \(good) of \(count) records synced with the right size (\(all) records in all)")
        }
        return (TimedSample(elapsed: elapsed, cpu: cpu), saved)
    }

    /// Checks the objects under `prefix`: exactly one per record of `expected` (source file name → record);
    /// plain, the content itself; encrypted, ciphertext that decrypts to the content.
    private static func verify(
        _ side: Encryption, prefix: String, expected: [String: Attachment], _ context: Context
    ) async throws {
        let listed = try await context.bucket.list(prefix: prefix)
        var problems: [String] = []
        if listed.count != expected.count {
            problems.append("\(listed.count) objects under \(prefix) for \(expected.count) files")
        }
        let sizes = Set(listed.values.map(\.size))
        if side == .encrypted, sizes.count != 1 || sizes.contains(where: { $0 <= Int64(fileSize) }) {
            problems.append(
                "the encrypted objects' sizes are \(sizes.sorted().prefix(3)), not one size above the content's")
        }
        for (name, attachment) in expected.sorted(by: { $0.key < $1.key }) {
            let key = prefix + attachment.filename
            guard let found = listed[key] else {
                problems.append("\(key) is missing")
                continue
            }
            switch side {
            case .plain:
                if found.size != Int64(fileSize) { problems.append("\(key) has \(found.size) bytes") }
                if found.etag != context.md5s[name] {
                    problems.append("\(key) has ETag \(found.etag), not the MD5 of \(name)")
                }
            case .encrypted:
                if found.etag == context.md5s[name] { problems.append("\(key) has the MD5 of \(name): it is plain") }
            }
            if problems.count > 5 { break }
        }
        if problems.isEmpty {
            problems += try await compareObjects(side, prefix: prefix, expected: expected, context)
        }
        guard problems.isEmpty else {
            throw BenchmarkFailure("\(side.rawValue): " + problems.prefix(5).joined(separator: "; "))
        }
    }

    /// Plain: downloads ``sampleSize`` objects picked at random and compares them with their files.
    /// Encrypted: downloads every object as stored (it must start with the format's magic and not be the
    /// content), and ``sampleSize`` of them through `EncryptedRemoteStorage`, which must give the content.
    /// Returns the problems found.
    private static func compareObjects(
        _ side: Encryption, prefix: String, expected: [String: Attachment], _ context: Context
    ) async throws -> [String] {
        try await withWorkFolder("p6e-check") { folder in
            try await context.server.withStorage(bucket: context.bucket.name, keyPrefix: prefix, folder: folder) {
                storage in
                let files = context.files
                let sample = Array(expected.shuffled().prefix(sampleSize))
                var problems: [String] = []
                if side == .encrypted {
                    // Every object, as stored.
                    problems += try await concurrentMap(Array(expected), concurrency: concurrency) {
                        name, attachment in
                        let stored = try await storage.downloadFile(
                            attachment: Attachment(id: attachment.id, filename: attachment.filename, state: .synced))
                        if !stored.starts(with: EncryptionComparison.magic) {
                            return "\(prefix + attachment.filename) does not start with ASE"
                        }
                        return stored == files[name] ? "\(prefix + attachment.filename) is the plain content" : nil
                    }.compactMap { $0 }
                }
                let reader = EncryptionComparison.remote(storage, side, key: context.key)
                for (name, attachment) in sample {
                    let data = try await reader.downloadFile(
                        attachment: Attachment(id: attachment.id, filename: attachment.filename, state: .synced))
                    if data != files[name] {
                        problems.append("\(prefix + attachment.filename) does not give the bytes of \(name)")
                    }
                }
                return problems
            }
        }
    }
}
