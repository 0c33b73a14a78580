import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// A test that runs crash workers (`attachment-sync-crash-worker`, Tests/CrashWorker) in one folder and kills
/// them at random moments (ProcessCrashTests, MultiProcessTests): the worker, the folder, the seed of the
/// test's random choices, and the check of what the killed workers left.
struct CrashWorkerRun {
    let worker: CommandLineTool
    let folder: TemporaryDirectory
    /// The seed of the test's choices: the value of the replay variable, else a new one.
    let seed: UInt64
    /// `seed N (replay: VARIABLE=N)`: printed when the run starts, and at the start of every failure message.
    let replay: String

    /// Locates the worker, makes the folder, and prints the seed (taken from `seedVariable` when set).
    init(_ test: String, seedVariable: String) throws {
        worker = try CommandLineTool.locate("attachment-sync-crash-worker")
        folder = try TemporaryDirectory(test)
        seed = SplitMix64.seed(from: seedVariable)
        replay = "seed \(seed) (replay: \(seedVariable)=\(seed))"
        print("\(test): \(replay)")
    }

    /// Opens a queue on what killed workers left in the folder, as the next launch of the app would (it
    /// takes the lease over from the dead processes and its startup check runs), and checks every promise:
    /// - every file handed over (`prepared` in a journal) is still where the app put it, or a committed
    ///   attachment whose local file or remote copy has its bytes (unless the worker was deleting it);
    /// - no record claims a missing local file, and no local file or remote copy has other bytes;
    /// - no upload was given up (after a kill, or when two processes upload the same attachment);
    /// - every file in the attachments folder is a record's (or a partial download it will resume);
    /// - no dead process's claim on a save is left.
    ///
    /// - Parameters:
    ///   - workers: The `as NAME` of each worker (journal `journal-NAME`, files in `user-NAME`, ids
    ///     `NAME-fN`), or `[nil]` for the one worker without a name (`journal`, `user`, `fN`).
    ///   - leaseDuration: The lease the workers ran with (`ATTACHMENT_SYNC_LEASE_MS`); `nil`, the default.
    ///   - round: Which kill or round this is, for the failure messages (after ``replay``).
    /// - Returns: How many files the workers handed over in all.
    func verify(workers: [String?], leaseDuration: Duration? = nil, round: String) async throws -> Int {
        let context = "\(replay), \(round)"
        var prepared: [String: (number: Int, source: String)] = [:]  // id → file number, where the app put it
        var deleting: Set<String> = []
        for name in workers {
            let journal = CrashWorkerFiles.journal(at: folder.path(name.map { "journal-\($0)" } ?? "journal"))
            let prefix = name.map { "\($0)-" } ?? ""
            let user = name.map { "user-\($0)" } ?? "user"
            for number in CrashWorkerFiles.numbers("prepared", inJournal: journal) {
                prepared["\(prefix)f\(number)"] = (number, folder.path("\(user)/f\(number).bin"))
            }
            for number in CrashWorkerFiles.numbers("deleting", inJournal: journal) {
                deleting.insert("\(prefix)f\(number)")
            }
        }
        let schema = Schema(tables: [Table(name: "rows", columns: [.text("attachment_id")]), createAttachmentTable()])
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: schema)
        var configuration = AttachmentQueue.Configuration(attachmentsDirectory: folder.path("attachments"))
        configuration.syncInterval = .zero
        if let leaseDuration { configuration.leaseDuration = leaseDuration }
        let remote = FileSystemRemoteStorage(directory: folder.path("remote"))
        let queue = AttachmentQueue(db: db, remoteStorage: remote, configuration: configuration)
        // A dead holder's lease is taken at once where this process can ask whether it runs (Linux, macOS);
        // until this queue holds it, it may not check files.
        try await withDeadline("taking the lease over from the killed processes") {
            for _ in 0..<500 {
                if await queue.takeLease() { break }
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        try await queue.waitForInit()
        try await queue.waitForStartupCheck()

        for (id, file) in prepared.sorted(by: { $0.key < $1.key }) {
            let expected = CrashWorkerFiles.content(file.number)
            let source = FileManager.default.contents(atPath: file.source)
            guard let attachment = try await queue.attachment(id: id) else {
                if deleting.contains(id) { continue }
                #expect(
                    source == expected,
                    "\(context): \(id) has no attachment and its file is \(source == nil ? "gone" : "changed")")
                continue
            }
            if attachment.state == .queuedDelete { continue }
            let local = attachment.localUri.flatMap { FileManager.default.contents(atPath: $0) }
            let remoteCopy = try? FileManager.default.contents(atPath: remote.fileURL(for: attachment).path)
            #expect(attachment.localUri == nil || local != nil, "\(context): \(id) claims a missing file")
            #expect(local == nil || local == expected, "\(context): \(id)'s local file has other bytes")
            #expect(remoteCopy == nil || remoteCopy == expected, "\(context): \(id)'s remote copy has other bytes")
            #expect(local == expected || remoteCopy == expected, "\(context): \(id) is lost")
        }
        let store = AttachmentStore(table: "attachments")
        let records = try await db.readTransaction { tx in try store.records(in: tx) }
        let givenUp = records.filter { $0.givenUp != nil }.map { "\($0.id): \($0.lastError ?? "")" }
        #expect(givenUp == [], "\(context): uploads given up (a double upload taken for a conflict?)")
        // No orphans: every file in the folder is a record's (or a partial download it will resume).
        var claimed = Set(records.compactMap(\.localPath))
        for record in records where record.localPath == nil {
            if let partial = try? FileName.downloadingName(for: record.localName()) {
                claimed.formUnion([partial, FileName.resumeValidatorName(for: partial)])
            }
        }
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path("attachments"))
        #expect(files.filter { !claimed.contains($0) }.sorted() == [], "\(context): orphans")
        let claims = try await db.readTransaction { tx in try ClaimStore(scope: "attachments").saveClaims(in: tx) }
        #expect(claims == [], "\(context): the dead processes' claims on saves were not ended")
        await queue.close()
        try await db.close()
        return prepared.count
    }
}
