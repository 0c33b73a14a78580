import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// A real process (`attachment-sync-crash-worker`) saving files it is handed (moved into the queue),
/// deleting, purging and syncing with a folder remote, killed with SIGKILL at random moments, reopened and
/// checked, again and again on the same files. Whenever the kill lands, every file handed over is either
/// still where the app put it or a committed attachment with the same bytes (locally or remotely), no record
/// claims a missing file, and startup leaves no orphan.
@Suite("Killed processes", .cleansUp)
struct ProcessCrashTests {
    /// The content the worker gives file number `n` (the same function as the worker's).
    static func content(_ n: Int) -> Data {
        var state = UInt64(n) &* 0x9E37_79B9_7F4A_7C15 &+ 1
        let size = Int(state % 150_000) + 1
        return Data(
            (0..<size).map { _ in
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                return UInt8(truncatingIfNeeded: state >> 33)
            })
    }

    static let kills = ProcessInfo.processInfo.environment["ATTACHMENT_SYNC_CRASH_KILLS"].flatMap(Int.init) ?? 30

    @Test("SIGKILL at random moments during saves, deletes, purges and transfers loses nothing")
    func killedAtRandomMoments() async throws {
        let worker = try CommandLineTool.locate("attachment-sync-crash-worker")
        let folder = try TemporaryDirectory()
        var generator = SystemRandomNumberGenerator()
        var checkedFiles = 0
        for round in 0..<Self.kills {
            let process = try ChildProcess(
                worker.url.path, [folder.path, String(UInt64.random(in: 1...UInt64.max, using: &generator))],
                standardError: .capture())
            // Anywhere from startup to well into the loop.
            try await Task.sleep(for: .milliseconds(Int.random(in: 20...700, using: &generator)))
            guard process.isRunning else {
                let termination = try await process.wait(seconds: 60)
                Issue.record("the worker stopped by itself (\(termination)): \(process.capturedError)")
                return
            }
            process.kill()
            let termination = try await process.wait(seconds: 60)
            #expect(
                termination == .signaled(SIGKILL), "the worker \(termination) before the kill: \(process.capturedError)"
            )
            checkedFiles = try await verify(folder, after: round)
        }
        #expect(checkedFiles > 10, "the worker handed over \(checkedFiles) files in all")
    }

    /// Opens the queue on what the killed process left (startup runs) and checks every promise.
    func verify(_ folder: TemporaryDirectory, after kill: Int) async throws -> Int {
        let journal = (try? String(contentsOfFile: folder.path("journal"), encoding: .utf8)) ?? ""
        var prepared: Set<Int> = []
        var deleting: Set<Int> = []
        for line in journal.split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count == 2, let number = Int(parts[1]) else { continue }
            if parts[0] == "prepared" { prepared.insert(number) }
            if parts[0] == "deleting" { deleting.insert(number) }
        }
        let schema = Schema(tables: [Table(name: "rows", columns: [.text("attachment_id")]), createAttachmentTable()])
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: schema)
        var configuration = AttachmentQueue.Configuration(attachmentsDirectory: folder.path("attachments"))
        configuration.syncInterval = .zero
        let queue = AttachmentQueue(
            db: db, remoteStorage: FileSystemRemoteStorage(directory: folder.path("remote")),
            configuration: configuration)
        try await queue.waitForInit()
        let remote = FileSystemRemoteStorage(directory: folder.path("remote"))

        for number in prepared.sorted() {
            let id = "f\(number)"
            let expected = Self.content(number)
            let source = FileManager.default.contents(atPath: folder.path("user/f\(number).bin"))
            guard let attachment = try await queue.attachment(id: id) else {
                if deleting.contains(number) { continue }
                #expect(
                    source == expected,
                    "kill \(kill): \(id) has no attachment and its file is \(source == nil ? "gone" : "changed")")
                continue
            }
            if attachment.state == .queuedDelete { continue }
            let local = attachment.localUri.flatMap { FileManager.default.contents(atPath: $0) }
            let remoteCopy = try? FileManager.default.contents(atPath: remote.fileURL(for: attachment).path)
            #expect(attachment.localUri == nil || local != nil, "kill \(kill): \(id) claims a missing file")
            #expect(local == nil || local == expected, "kill \(kill): \(id)'s local file has other bytes")
            #expect(remoteCopy == nil || remoteCopy == expected, "kill \(kill): \(id)'s remote copy has other bytes")
            #expect(local == expected || remoteCopy == expected, "kill \(kill): \(id) is lost")
        }
        // No orphans: every file in the folder is a record's (or a partial download it will resume).
        let store = AttachmentStore(table: "attachments")
        let records = try await db.readTransaction { tx in try store.records(in: tx) }
        var claimed = Set(records.compactMap(\.localPath))
        for record in records where record.localPath == nil {
            if let partial = try? FileName.downloadingName(for: record.localName()) { claimed.insert(partial) }
        }
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path("attachments"))
        #expect(files.filter { !claimed.contains($0) } == [], "kill \(kill): orphans")
        await queue.close()
        try await db.close()
        return prepared.count
    }
}
