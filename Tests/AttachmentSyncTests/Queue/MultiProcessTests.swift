import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// Several processes of one app (the app, its share extension, a widget) on one database, attachments folder
/// and remote, each saving, deleting, purging and syncing (`attachment-sync-crash-worker … as NAME`), while
/// SIGKILL hits any of them at random moments; then all are killed and a fresh queue checks every promise:
/// every file handed over is where the app put it or a committed attachment with its bytes, no record claims
/// a missing file, no file is left that nobody owns, and no upload met another process's upload of the same
/// attachment as a conflict.
@Suite("Several processes on one folder", .cleansUp)
struct MultiProcessTests {
    static let rounds = ProcessInfo.processInfo.environment["ATTACHMENT_SYNC_MULTI_ROUNDS"].flatMap(Int.init) ?? 8
    static let names = ["app", "share", "widget"]

    @Test("three processes saving, deleting and syncing, killed at random: nothing lost, no orphan, no conflict")
    func killedAtRandom() async throws {
        let worker = try CommandLineTool.locate("attachment-sync-crash-worker")
        let folder = try TemporaryDirectory()
        var generator = SystemRandomNumberGenerator()
        var environment = ProcessInfo.processInfo.environment
        // Short, so that takeovers after a kill happen within a round.
        environment["ATTACHMENT_SYNC_LEASE_MS"] = "300"
        var handedOver = 0
        var seed = UInt64.random(in: 1...UInt64.max / 2, using: &generator)
        print("MultiProcessTests: first seed \(seed)")
        for round in 0..<Self.rounds {
            var processes: [String: ChildProcess] = [:]
            func start(_ name: String) throws {
                seed += 1
                processes[name] = try ChildProcess(
                    worker.url.path, [folder.path, String(seed), "as", name], environment: environment,
                    standardError: .capture())
            }
            for name in Self.names { try start(name) }
            // A few kills of one process while the others go on, each restarted.
            for _ in 0..<3 {
                try await Task.sleep(for: .milliseconds(Int.random(in: 50...400, using: &generator)))
                let victim = Self.names.randomElement(using: &generator)!
                let process = processes[victim]!
                guard process.isRunning else {
                    let termination = try await process.wait(seconds: 60)
                    Issue.record(
                        "round \(round): \(victim) stopped by itself (\(termination)): \(process.capturedError)")
                    for other in processes.values { other.kill() }
                    return
                }
                process.kill()
                _ = try await process.wait(seconds: 60)
                try start(victim)
            }
            try await Task.sleep(for: .milliseconds(Int.random(in: 50...400, using: &generator)))
            for (name, process) in processes {
                guard process.isRunning else {
                    Issue.record("round \(round): \(name) stopped by itself: \(process.capturedError)")
                    continue
                }
                process.kill()
            }
            for process in processes.values { _ = try await process.wait(seconds: 60) }
            handedOver = try await verify(folder, after: round)
        }
        #expect(handedOver > 20, "the workers handed over \(handedOver) files in all")
    }

    /// Opens a queue on what the killed processes left (its startup runs) and checks every promise.
    func verify(_ folder: TemporaryDirectory, after round: Int) async throws -> Int {
        var prepared: [String: Int] = [:]  // id → file number
        var deleting: Set<String> = []
        for name in Self.names {
            let journal = (try? String(contentsOfFile: folder.path("journal-\(name)"), encoding: .utf8)) ?? ""
            for line in journal.split(separator: "\n") {
                let parts = line.split(separator: " ")
                guard parts.count == 2, let number = Int(parts[1]) else { continue }
                if parts[0] == "prepared" { prepared["\(name)-f\(number)"] = number }
                if parts[0] == "deleting" { deleting.insert("\(name)-f\(number)") }
            }
        }
        let schema = Schema(tables: [Table(name: "rows", columns: [.text("attachment_id")]), createAttachmentTable()])
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: schema)
        var configuration = AttachmentQueue.Configuration(attachmentsDirectory: folder.path("attachments"))
        configuration.syncInterval = .zero
        configuration.leaseDuration = .milliseconds(300)
        let queue = AttachmentQueue(
            db: db, remoteStorage: FileSystemRemoteStorage(directory: folder.path("remote")),
            configuration: configuration)
        // The dead processes' lease runs out within 300 ms: until then this queue may not check files.
        try await withDeadline("taking the lease over from the killed processes") {
            for _ in 0..<500 {
                if await queue.takeLease() { break }
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        try await queue.waitForInit()
        try await queue.waitForStartupCheck()
        let remote = FileSystemRemoteStorage(directory: folder.path("remote"))

        for (id, number) in prepared.sorted(by: { $0.key < $1.key }) {
            let name = String(id.prefix { $0 != "-" })
            let expected = ProcessCrashTests.content(number)
            let source = FileManager.default.contents(atPath: folder.path("user-\(name)/f\(number).bin"))
            guard let attachment = try await queue.attachment(id: id) else {
                if deleting.contains(id) { continue }
                #expect(
                    source == expected,
                    "round \(round): \(id) has no attachment and its file is \(source == nil ? "gone" : "changed")")
                continue
            }
            if attachment.state == .queuedDelete { continue }
            let local = attachment.localUri.flatMap { FileManager.default.contents(atPath: $0) }
            let remoteCopy = try? FileManager.default.contents(atPath: remote.fileURL(for: attachment).path)
            #expect(attachment.localUri == nil || local != nil, "round \(round): \(id) claims a missing file")
            #expect(local == nil || local == expected, "round \(round): \(id)'s local file has other bytes")
            #expect(remoteCopy == nil || remoteCopy == expected, "round \(round): \(id)'s remote copy has other bytes")
            #expect(local == expected || remoteCopy == expected, "round \(round): \(id) is lost")
        }
        let store = AttachmentStore(table: "attachments")
        let records = try await db.readTransaction { tx in try store.records(in: tx) }
        let givenUp = records.filter { $0.givenUp != nil }.map { "\($0.id): \($0.lastError ?? "")" }
        #expect(givenUp == [], "round \(round): uploads given up (a double upload taken for a conflict?)")
        // No orphans: every file in the folder is a record's (or a partial download it will resume).
        var claimed = Set(records.compactMap(\.localPath))
        for record in records where record.localPath == nil {
            if let partial = try? FileName.downloadingName(for: record.localName()) {
                claimed.formUnion([partial, FileName.resumeValidatorName(for: partial)])
            }
        }
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path("attachments"))
        #expect(files.filter { !claimed.contains($0) }.sorted() == [], "round \(round): orphans")
        let claims = try await db.readTransaction { tx in try ClaimStore(scope: "attachments").saveClaims(in: tx) }
        #expect(claims == [], "round \(round): the dead processes' claims on saves were not ended")
        await queue.close()
        try await db.close()
        return prepared.count
    }
}
