import AttachmentSync
import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// The hand-off's promise across crashes: an app process (`attachment-sync-handoff-app`) hands its uploads
/// and downloads to the spooled service (a process of its own that runs on) and is killed with SIGKILL at
/// random moments; the service finishes transfers while the app is dead; every restart adopts what it finds.
///
/// `ATTACHMENT_SYNC_HANDOFF_KILL_SEED` replays a run's choices (the test prints its seed first);
/// `ATTACHMENT_SYNC_HANDOFF_FILES` sets the number of uploads and of downloads (200).
@Suite("Background hand-off: an app killed at random moments")
struct HandOffCrashTests {
    @Test(
        "uploads and downloads handed off by an app killed at random moments: every one adopted once, byte-exact, nothing lost, nothing uploaded twice (the gateway's count)"
    )
    func killedAppAdoptsEveryResultOnce() async throws {
        let environment = ProcessInfo.processInfo.environment
        let count = environment["ATTACHMENT_SYNC_HANDOFF_FILES"].flatMap(Int.init) ?? 200
        let seed = SplitMix64.seed(from: "ATTACHMENT_SYNC_HANDOFF_KILL_SEED")
        print("HandOffCrashTests: seed \(seed) (ATTACHMENT_SYNC_HANDOFF_KILL_SEED), \(count) files each way")
        var random = SplitMix64(seed: seed)
        let uploads = HandOffAppFiles.uploadIds(count)
        let downloads = HandOffAppFiles.downloadIds(count)
        try await S3TestBucket.with("handoff-kill") { storage, bucket in
            // Another device stored the files the app's rows refer to.
            try await Self.store(downloads, in: storage)
            try await withTemporaryDirectory { root in
                let spool = root.appendingPathComponent("spool")
                _ = try TransferFolder(spool)
                // Two at a time, 30 ms before each (about 6 s for all 400), so that the app is killed while
                // transfers are still with the service, and results come while it is dead.
                let service = try SpoolTransferServiceTests.startService(
                    spool, ["--concurrency", "2", "--pace", "30"])
                defer { service.kill() }
                let tool = try CommandLineTool.locate("attachment-sync-handoff-app")
                let arguments = [root.path, bucket.name, String(count)]
                let folder = try TransferFolder(spool)
                var finishedWhileDead = 0
                // Whether a round saw the service finish a transfer the app had handed over before it died.
                var resultWhileDead = false
                for round in 0..<10 {
                    let app = try ChildProcess(tool.url.path, arguments, standardError: .inherit)
                    let alive = 200 + Int(random.next() % 1_800)
                    let dead = Int(random.next() % 800)
                    try await Task.sleep(for: .milliseconds(alive))
                    if !resultWhileDead {
                        // Kill while the service has transfers in hand, whatever the timing.
                        try await Self.waitUntil("a transfer handed over") {
                            try !folder.ids(in: folder.pending).isEmpty
                        }
                    }
                    _ = app.send(SIGKILL)
                    let ended = try await app.wait(seconds: 30)
                    #expect(ended == .signaled(SIGKILL), "the app ended on its own: \(ended)")
                    let before = try folder.ids(in: folder.results)
                    // A transfer still pending without a result now (the app is dead) gets its result while
                    // the app is dead (the service writes the result, then removes the pending transfer). The
                    // service may have finished every one in hand before the app was reaped: then the next
                    // round tries again.
                    if !resultWhileDead, try !folder.ids(in: folder.pending).subtracting(before).isEmpty {
                        try await Self.waitUntil("a result while the app is dead") {
                            try !folder.ids(in: folder.results).subtracting(before).isEmpty
                        }
                        resultWhileDead = true
                    }
                    try await Task.sleep(for: .milliseconds(dead))
                    let arrived = try folder.ids(in: folder.results).subtracting(before).count
                    finishedWhileDead += arrived
                    print(
                        "HandOffCrashTests round \(round): killed after \(alive) ms, dead for \(dead) ms; the service "
                            + "finished \(arrived) transfers meanwhile")
                }
                #expect(resultWhileDead, "no round killed the app while the service still had a transfer in hand")
                #expect(finishedWhileDead > 0)
                let app = try ChildProcess(tool.url.path, arguments, standardError: .inherit)
                defer { app.kill() }
                try await Self.waitUntilEverythingSynced(root, uploads + downloads)
                try await BackgroundHandOffTests.waitUntilAcknowledged(try SpoolTransferService(folder: spool))
                app.kill()
                _ = try await app.wait(seconds: 30)

                let events = try String(contentsOf: root.appendingPathComponent("events"), encoding: .utf8)
                    .split(separator: "\n").map(String.init)
                try Self.checkAdoptedOnce(events, uploads: uploads, downloads: downloads)
                try await Self.checkFilesOnDisk(root, downloads + uploads)
                #expect(
                    try TransferFolder(spool).ids(in: TransferFolder(spool).pending).isEmpty, "nothing left pending")

                let usage = try await CephUsage.settled(bucket: bucket.name)
                // The test stored the downloads' objects; the uploads went from the service, once each.
                #expect(usage["put_obj"].all == 2 * count, "one PUT per file, none twice: \(usage)")
                #expect(usage["put_obj"].successful == 2 * count, "\(usage)")
                for id in uploads {
                    let stored = try await storage.downloadFile(attachment: Self.attachment(id))
                    #expect(stored == HandOffAppFiles.content(of: id), "object \(id).jpg")
                }
            }
        }
    }

    /// Waits (bounded: 30 seconds) until `condition` holds.
    static func waitUntil(_ what: String, _ condition: @escaping @Sendable () throws -> Bool) async throws {
        try await withDeadline(seconds: 30, what) {
            for _ in 0..<3_000 {
                if try condition() { return }
                try await Task.sleep(for: .milliseconds(10))
            }
            throw AttachmentError(code: .timedOut, message: "waited in vain for \(what)")
        }
    }

    static func attachment(_ id: String) -> AttachmentSync.Attachment {
        let content = HandOffAppFiles.content(of: id)
        return AttachmentSync.Attachment(
            id: id, filename: id + ".jpg", state: .queuedUpload, mediaType: "image/jpeg", size: Int64(content.count),
            contentHash: FileStreaming.sha256(content))
    }

    /// Stores the files `ids` in the bucket, eight at a time.
    static func store(_ ids: [String], in storage: S3RemoteStorage) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, id) in ids.enumerated() {
                if index >= 8 { try await group.next() }
                group.addTask {
                    try await storage.uploadFile(data: HandOffAppFiles.content(of: id), attachment: attachment(id))
                }
            }
            try await group.waitForAll()
        }
    }

    /// Waits (bounded: three minutes) until every attachment in `ids` is synced and no hand-off is recorded,
    /// reading the app's database from this process.
    static func waitUntilEverythingSynced(_ root: URL, _ ids: [String]) async throws {
        // The app's schema (Tests/HandOffApp/main.swift).
        let schema = Schema(tables: [
            Table(name: "checklists", columns: [.text("photo_id")]), createAttachmentTable(name: "attachments"),
        ])
        let db = try LocalDatabase(path: root.appendingPathComponent("app.sqlite").path, schema: schema)
        defer { Task { try? await db.close() } }
        try await withDeadline(seconds: 180, "every attachment synced") {
            var last = ""
            for _ in 0..<1_800 {
                let (synced, handOffs) = try await db.readTransaction { tx in
                    (
                        try tx.getAll(
                            sql: "SELECT id FROM attachments WHERE state = ?",
                            parameters: [AttachmentState.synced.rawValue]
                        ) { try $0.getString(name: "id") },
                        try tx.get(sql: "SELECT count(*) AS n FROM attachment_sync_handoffs", parameters: []) {
                            try $0.getInt(name: "n")
                        }
                    )
                }
                if Set(synced).isSuperset(of: ids), handOffs == 0 { return }
                last = "\(synced.count) of \(ids.count) synced, \(handOffs) hand-offs recorded"
                try await Task.sleep(for: .milliseconds(100))
            }
            throw AttachmentError(code: .timedOut, message: last)
        }
    }

    /// No attachment was adopted twice (an `uploaded` or `downloaded` event each at most; a kill may have cut
    /// the line of one), and none was lost.
    static func checkAdoptedOnce(_ events: [String], uploads: [String], downloads: [String]) throws {
        var adopted: [String: Int] = [:]
        for line in events {
            let parts = line.split(separator: " ")
            guard parts.count == 2 else { continue }
            if parts[0] == "uploaded" || parts[0] == "downloaded" { adopted[String(parts[1]), default: 0] += 1 }
            #expect(parts[0] != "lost", "\(line)")
        }
        let twice = adopted.filter { $0.value > 1 }
        #expect(twice.isEmpty, "adopted more than once: \(twice.keys.sorted())")
        #expect(Set(adopted.keys).isSubset(of: Set(uploads + downloads)))
        let handedOff = Set(events.filter { $0.hasPrefix("handed-off ") }.map { String($0.dropFirst(11)) })
        print("HandOffCrashTests: \(adopted.count) adoptions seen, \(handedOff.count) attachments handed off")
        #expect(handedOff.count > 0)
    }

    /// Every attachment's file is in the app's folder, byte-exact.
    static func checkFilesOnDisk(_ root: URL, _ ids: [String]) async throws {
        for id in ids {
            let path = root.appendingPathComponent("attachments").appendingPathComponent(id + ".jpg").path
            #expect(FileManager.default.contents(atPath: path) == HandOffAppFiles.content(of: id), "\(id).jpg")
        }
    }
}
