import AttachmentSync
import AttachmentSyncS3
import Crypto
import Foundation

/// P8E (issue 28): P8's queue side with end-to-end encryption on, against the same queue without it in the
/// same run. 2,000 objects of 64 KiB (50 with `--quick`, a smoke run) downloaded from the local Ceph S3
/// gateway onto a second device (`maxConcurrentTransfers` 16): through ``S3RemoteStorage`` from a prefix
/// holding the content (plain), or through `EncryptedRemoteStorage(wrapping:)` around it from a prefix
/// holding the same content encrypted (encrypted).
///
/// Set-up (not timed): both prefixes are filled once through the adapters, the encrypted one by
/// `EncryptedRemoteStorage` with the run's key for attachments of the ids the device's rows name (the
/// format binds each object to its attachment's id); every encrypted object is listed with one size above
/// the content's. Each side then starts a fresh device whose watch follows the checklists' photos; the time
/// runs from the commit of one transaction inserting a checklist row per object until a watch counts every
/// record synced, and the client CPU over that time is given per MiB of content. Checked: every record is
/// synced with the content's size, and the attachments folder holds exactly one file per object, the
/// content byte for byte. The sides take turns three times (once with `--quick`), plain first in even
/// rounds; the medians are compared.
enum S3EncryptedDownloadsScenario {
    /// The size of each object, as in P8.
    static let fileSize = S3DownloadsScenario.fileSize
    /// The queue's `maxConcurrentTransfers`, as in P8.
    static let concurrency = S3DownloadsScenario.concurrency

    /// Everything the sides share.
    struct Context: Sendable {
        var server: S3Server
        var bucket: S3Bucket
        /// The attachment ids, in order; object `i` is `<prefix>` + `ids[i]` + `.bin`.
        var ids: [String]
        /// Each object's content, by id.
        var files: [String: Data]
        /// The run's key.
        var key: SymmetricKey
    }

    /// Where each side's objects are, under the run's bucket.
    static func prefix(_ side: Encryption) -> String {
        "p8e-\(side.rawValue)/"
    }

    /// Runs P8E.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let count = size == .full ? 2000 : 50
        let rounds = size == .full ? 3 : 1
        let server = try S3Server.fromEnvironment()
        return try await withWorkFolder("p8e") { folder in
            let ids = (0..<count).map { String(format: "d%05d", $0) }
            var files: [String: Data] = [:]
            for (index, id) in ids.enumerated() { files[id] = content(index: 900_000 + index, size: fileSize) }
            return try await S3Bucket.withNew(server: server, label: "p8e", folder: folder) { bucket in
                let context = Context(
                    server: server, bucket: bucket, ids: ids, files: files, key: SymmetricKey(size: .bits256))
                try await populate(context, folder: folder)
                var samples: [Encryption: [TimedSample]] = [:]
                for round in 0..<rounds {
                    for side in Encryption.order(round: round) {
                        samples[side, default: []].append(try await download(side, round: round, context))
                    }
                }
                return EncryptionComparison.report(
                    title: "\(formatCount(count)) × 64 KiB downloads from Ceph S3 onto a second device by the queue, "
                        + "encrypted vs plain",
                    samples, bytes: Int64(count * fileSize), rounds: rounds,
                    details: [
                        "each side checked: \(formatCount(count)) records synced, \(formatCount(count)) files read "
                            + "back and compared byte for byte; the encrypted objects are ciphertext of one size "
                            + "above the content's"
                    ])
            }
        }
    }

    /// Not timed: uploads every object under both prefixes, the encrypted ones through `EncryptedRemoteStorage`
    /// (as attachment `<id>`, file `<id>.bin`), and checks that the encrypted prefix holds ciphertext.
    private static func populate(_ context: Context, folder: WorkFolder) async throws {
        let files = context.files
        for side in Encryption.allCases {
            try await context.server.withStorage(
                bucket: context.bucket.name, keyPrefix: prefix(side), folder: folder
            ) { storage in
                let remote = EncryptionComparison.remote(storage, side, key: context.key)
                _ = try await concurrentMap(context.ids, concurrency: concurrency) { id in
                    try await remote.uploadFile(
                        data: files[id] ?? Data(),
                        attachment: Attachment(
                            id: id, filename: id + ".bin", state: .queuedUpload, size: Int64(fileSize)))
                }
            }
        }
        let listed = try await context.bucket.list(prefix: prefix(.encrypted))
        let sizes = Set(listed.values.map(\.size))
        guard listed.count == context.ids.count, sizes.count == 1, let size = sizes.first, size > Int64(fileSize)
        else {
            throw BenchmarkFailure(
                "the encrypted prefix holds \(listed.count) objects of sizes \(sizes.sorted().prefix(3)) for "
                    + "\(context.ids.count) files of \(fileSize) bytes")
        }
    }

    /// One side: a fresh device over the side's prefix, one transaction of checklist rows, timed until every
    /// record is synced; then the records and the files are checked.
    private static func download(_ side: Encryption, round: Int, _ context: Context) async throws -> TimedSample {
        try await withWorkFolder("p8e-\(round)") { folder in
            let sample = try await context.server.withStorage(
                bucket: context.bucket.name, keyPrefix: prefix(side), folder: folder
            ) { storage in
                let remote = EncryptionComparison.remote(storage, side, key: context.key)
                return try await withDevice(
                    in: folder, remote: remote, watchFileExtension: "bin", maxConcurrentTransfers: concurrency
                ) { device in
                    try await referAndWait(context, device: device)
                }
            }
            try verify(folder.file("attachments"), side: side, context)
            return sample
        }
    }

    /// Starts sync, then times the commit of one checklist row per object until every record is synced, with
    /// the CPU used meanwhile; checks that every record is synced with the content's size.
    private static func referAndWait(_ context: Context, device: Device) async throws -> TimedSample {
        try await device.queue.startSync()
        let count = context.ids.count
        let cpuBefore = CPUTime.used()
        let (_, elapsed) = try await measure {
            try await device.db.execute(
                sql: """
                    WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < ?)
                    INSERT INTO checklists (id, description, completed, photo_id)
                    SELECT printf('c%05d', i), 'item', 0, printf('d%05d', i) FROM seq
                    """,
                parameters: [count])
            try await device.waitForCount(count, in: .synced, seconds: 300)
        }
        let cpu = CPUTime.used() - cpuBefore
        let good = try await device.db.get(
            sql: "SELECT count(*) AS n FROM attachments WHERE state = ? AND has_synced = 1 AND size = ?",
            parameters: [AttachmentState.synced.rawValue, fileSize]
        ) { try $0.getInt(name: "n") }
        guard good == count else {
            throw BenchmarkFailure("the queue has \(good) of \(count) records synced with the right size")
        }
        return TimedSample(elapsed: elapsed, cpu: cpu)
    }

    /// The attachments folder holds exactly one file per object, `<id>.bin`, with the object's content.
    private static func verify(_ destination: URL, side: Encryption, _ context: Context) throws {
        let names = Set(try FileManager.default.contentsOfDirectory(atPath: destination.path))
        let expected = Set(context.ids.map { $0 + ".bin" })
        guard names == expected else {
            throw BenchmarkFailure(
                "\(side.rawValue): the attachments folder holds \(names.count) files for \(expected.count) objects "
                    + "(\(names.symmetricDifference(expected).sorted().prefix(3)) differ)")
        }
        for id in context.ids {
            guard
                FileManager.default.contents(atPath: destination.appendingPathComponent(id + ".bin").path)
                    == context.files[id]
            else { throw BenchmarkFailure("\(side.rawValue): \(id).bin does not hold the content") }
        }
    }
}
