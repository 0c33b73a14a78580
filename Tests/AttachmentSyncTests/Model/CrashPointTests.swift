import Foundation
import Testing

@testable import AttachmentSync

/// Each operation killed at each of its durable operations in turn (see ``CrashHarness``): whatever the
/// moment, the file handed over or saved is never lost, no record claims a file that is not there, and
/// startup leaves no file nobody owns.
@Suite("Crashes at every durable operation")
struct CrashPointTests {
    static let bytes = Data((0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) })

    /// Files in the attachments folder that no record claims (after a restart there must be none), leaving
    /// out the partial download of an attachment still waiting for its content (kept to resume).
    static func orphans(_ device: CrashHarness) async throws -> [String] {
        let store = AttachmentStore(table: "attachments")
        let records = try await device.db.readTransaction { tx in try store.records(in: tx) }
        var claimed = Set(records.compactMap(\.localPath))
        for record in records where record.localPath == nil {
            guard let partial = try? FileName.downloadingName(for: record.localName()) else { continue }
            claimed.formUnion([partial, FileName.resumeValidatorName(for: partial)])
        }
        return try device.filesInAttachments().filter { !claimed.contains($0) }
    }

    @Test(
        "saveFile(fileURL:moveFile: true): the caller's file or a committed attachment with its bytes, never neither",
        arguments: [false, true])
    func moveFileNeverLosesTheFile(symlink: Bool) async throws {
        var source = URL(fileURLWithPath: "/")
        var target: URL?
        let points = try await CrashHarness.crashAtEveryPoint(
            make: {
                let device = try CrashHarness()
                try await device.open()
                if symlink {
                    target = try device.userFile("real.mov", Self.bytes)
                    source = URL(fileURLWithPath: device.userFolder).appendingPathComponent("link.mov")
                    try FileManager.default.createSymbolicLink(at: source, withDestinationURL: target!)
                } else {
                    source = try device.userFile("clip.mov", Self.bytes)
                }
                return device
            },
            operation: { device in
                _ = try await device.queue.saveFile(
                    fileURL: source, mediaType: "video/quicktime", id: "clip", moveFile: true
                ) { tx, attachment in
                    try tx.execute(
                        sql: "INSERT INTO rows (id, attachment_id) VALUES (?, ?)", arguments: ["r", attachment.id])
                }
            },
            verify: { device, crashed in
                let record = try await device.record("clip")
                let sourceBytes = FileManager.default.contents(atPath: source.path)
                if let record {
                    #expect(record.localPath.flatMap(device.localBytes) == Self.bytes, "the attachment has the bytes")
                    let info = try device.disk.info(
                        atPath: (device.attachments as NSString).appendingPathComponent(record.localPath!))
                    #expect(info?.kind == .regular, "stored as a regular file, never as a link")
                } else {
                    #expect(sourceBytes == Self.bytes, "no attachment: the caller's file is where it was")
                }
                if !crashed {
                    #expect(record != nil)
                    #expect(sourceBytes == nil, "moved: the original is gone once the save returned")
                }
                if let target { #expect(FileManager.default.contents(atPath: target.path) == Self.bytes) }
                #expect(try await Self.orphans(device) == [])
            })
        #expect(points > 5, "the save went through \(points) durable operations")
    }

    @Test("saveFiles: the whole batch is committed with its bytes or none of it is, and no moved file is lost")
    func saveBatchIsAllOrNothing() async throws {
        let items = (0..<4).map { testBytes(3_000 + $0 * 100, seed: UInt8($0 + 1)) }
        var sources: [URL] = []
        let points = try await CrashHarness.crashAtEveryPoint(
            make: {
                let device = try CrashHarness()
                try await device.open()
                sources = [
                    try device.userFile("copied.png", items[1]), try device.userFile("moved-1.mov", items[2]),
                    try device.userFile("moved-2.mov", items[3]),
                ]
                return device
            },
            operation: { device in
                _ = try await device.queue.saveFiles([
                    .init(data: items[0], mediaType: nil, fileExtension: "jpg", id: "b0"),
                    .init(fileURL: sources[0], mediaType: nil, id: "b1"),
                    .init(fileURL: sources[1], mediaType: nil, id: "b2", moveFile: true),
                    .init(fileURL: sources[2], mediaType: nil, id: "b3", moveFile: true),
                ]) { tx, attachments in
                    for attachment in attachments {
                        try tx.execute(
                            sql: "INSERT INTO rows (id, attachment_id) VALUES (?, ?)",
                            arguments: ["r-" + attachment.id, attachment.id])
                    }
                }
            },
            verify: { device, crashed in
                var records: [AttachmentRecord] = []
                for index in 0..<4 { if let record = try await device.record("b\(index)") { records.append(record) } }
                #expect(records.count == 0 || records.count == 4, "all or nothing: \(records.count) records")
                let rows = try await device.db.get(sql: "SELECT count(*) AS n FROM rows") { try $0.getInt(name: "n") }
                #expect(rows == records.count, "the hook's rows commit with the records")
                for (index, record) in records.enumerated() {
                    #expect(record.localPath.flatMap(device.localBytes) == items[index], "b\(index) has its bytes")
                }
                #expect(FileManager.default.contents(atPath: sources[0].path) == items[1], "a copied file stays")
                for (offset, source) in sources.dropFirst().enumerated() {
                    let bytes = FileManager.default.contents(atPath: source.path)
                    if records.isEmpty {
                        #expect(bytes == items[offset + 2], "no attachment: the moved file is where it was")
                    } else if !crashed {
                        #expect(bytes == nil, "moved: the original is gone once the save returned")
                    }
                }
                if !crashed { #expect(records.count == 4) }
                #expect(try await Self.orphans(device) == [])
            })
        #expect(points > 12, "the batch went through \(points) durable operations")
    }

    @Test("saveFile(data:): a record always has its file, and no file is left without one")
    func saveDataIsAllOrNothing() async throws {
        try await CrashHarness.crashAtEveryPoint(
            make: {
                let device = try CrashHarness(insensitive: true)
                try await device.open()
                // Another attachment whose id differs only in case: it must not be touched.
                _ = try await device.queue.saveFile(
                    data: Data("other".utf8), mediaType: nil, fileExtension: "jpg", id: "Photo")
                return device
            },
            operation: { device in
                _ = try await device.queue.saveFile(data: Self.bytes, mediaType: nil, fileExtension: "jpg", id: "photo")
            },
            verify: { device, crashed in
                if let record = try await device.record("photo") {
                    #expect(record.localPath.flatMap(device.localBytes) == Self.bytes)
                } else {
                    #expect(crashed, "without a crash the save returned, so its record exists")
                }
                let other = try #require(try await device.record("Photo"))
                #expect(other.localPath.flatMap(device.localBytes) == Data("other".utf8))
                #expect(try await Self.orphans(device) == [])
            })
    }

    @Test("upload, download, delete, purge and eviction: no state claims a missing file, no orphan is left")
    func transfersAndRemovals() async throws {
        // Each scenario: what is set up before, and the operation that is killed.
        let scenarios: [(String, (CrashHarness) async throws -> Void, (CrashHarness) async throws -> Void)] = [
            (
                "upload",
                { device in
                    _ = try await device.queue.saveFile(data: Self.bytes, mediaType: nil, fileExtension: "jpg", id: "a")
                },
                { device in try await device.queue.syncNow() }
            ),
            (
                "download",
                { device in
                    await device.store.seed("b.jpg", Self.bytes, sha256: FileStreaming.sha256(Self.bytes))
                    await device.queue.reconcile([try WatchedAttachmentItem(id: "b", fileExtension: "jpg")])
                },
                { device in try await device.queue.syncNow() }
            ),
            (
                "delete",
                { device in
                    _ = try await device.queue.saveFile(data: Self.bytes, mediaType: nil, fileExtension: "jpg", id: "a")
                    try await device.queue.syncNow()
                },
                { device in
                    try await device.queue.deleteFile(attachmentId: "a")
                    try await device.queue.syncNow()
                }
            ),
            (
                "purge",
                { device in
                    _ = try await device.queue.saveFile(
                        data: Self.bytes, mediaType: nil, fileExtension: "tar.gz", id: "a")
                    try await device.queue.syncNow()
                },
                { device in _ = try await device.queue.purge(attachmentId: "a") }
            ),
            (
                "eviction",
                { device in
                    _ = try await device.queue.saveFile(data: Self.bytes, mediaType: nil, fileExtension: "jpg", id: "a")
                    try await device.queue.syncNow()
                    await device.queue.reconcile([])  // archived
                },
                { device in try await device.queue.expireCache() }
            ),
        ]
        for (name, setUp, operation) in scenarios {
            try await CrashHarness.crashAtEveryPoint(
                make: {
                    let device = try CrashHarness { $0.archivedCacheLimit = 0 }
                    try await device.open()
                    try await setUp(device)
                    return device
                },
                operation: operation,
                verify: { device, _ in
                    for record in try await device.db.getAll(
                        sql: "SELECT id, local_uri, state FROM attachments WHERE local_uri IS NOT NULL AND state <> 2",
                        mapper: { (try $0.getString(name: "id"), try $0.getString(name: "local_uri")) })
                    {
                        #expect(device.localBytes(record.1) == Self.bytes, "\(name): \(record.0) claims its file")
                    }
                    let orphans = try await Self.orphans(device)
                    #expect(orphans == [], "\(name): \(orphans)")
                    // And whatever happened, the bytes are somewhere.
                    let remote = await device.store.objects.values.map(\.data)
                    if name != "delete" {
                        let local = try device.filesInAttachments().compactMap { device.localBytes($0) }
                        #expect((local + remote).contains(Self.bytes), "\(name): the bytes survive")
                    }
                })
        }
    }
}
