import AttachmentSync
import Foundation
import TestSupport

// A process for the crash test (Tests/AttachmentSyncTests/Processes/ProcessCrashTests.swift) to kill with
// SIGKILL at random moments: it saves files the app "recorded" (moving them into the queue), deletes some,
// purges some, and syncs with a folder remote, for ever, journaling each intent before it acts and each
// outcome after. Every run continues where the journal ends.
//
// Usage: attachment-sync-crash-worker ROOT SEED [sync | as NAME]
//   ROOT/app.sqlite, ROOT/attachments, ROOT/remote, ROOT/user (the files handed over), ROOT/journal.
// With `sync`, it saves nothing: it starts syncing what the table holds (startup tried again until it
// succeeds), writes `syncing` to the journal, and syncs until it is killed (the unreachable-folder test,
// Tests/AttachmentSyncTests/Files/UnreachableFolderTests.swift, and the lease tests).
// With `as NAME`, it is one of several processes of one app on the same database, folder and remote (the
// multi-process test, Tests/AttachmentSyncTests/Processes/MultiProcessTests.swift): its journal is
// ROOT/journal-NAME, its files ROOT/user-NAME/…, its attachment ids NAME-f…; half the seeds also sync in
// the background. ATTACHMENT_SYNC_LEASE_MS sets the queue's lease duration.

let arguments = CommandLine.arguments
let name: String? = arguments.count == 5 && arguments[3] == "as" ? arguments[4] : nil
guard arguments.count == 3 || (arguments.count == 4 && arguments[3] == "sync") || name != nil,
    let seed = UInt64(arguments[2])
else {
    FileHandle.standardError.write(Data("usage: attachment-sync-crash-worker ROOT SEED [sync | as NAME]\n".utf8))
    exit(2)
}
let root = URL(fileURLWithPath: arguments[1])
let journalName = name.map { "journal-\($0)" } ?? "journal"
let idPrefix = name.map { "\($0)-" } ?? ""

/// Appends a line to the journal with one `write`, so a kill leaves whole lines (or none) behind.
func journal(_ line: String) {
    let handle = FileHandle(forWritingAtPath: root.appendingPathComponent(journalName).path)!
    handle.seekToEndOfFile()
    handle.write(Data((line + "\n").utf8))
    handle.closeFile()
}

var random = seed
@MainActor func next(below bound: Int) -> Int {
    random = random &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
    return Int((random >> 33) % UInt64(bound))
}

let schema = Schema(tables: [Table(name: "rows", columns: [.text("attachment_id")]), createAttachmentTable()])
let db = try LocalDatabase(path: root.appendingPathComponent("app.sqlite").path, schema: schema)
var configuration = AttachmentQueue.Configuration(
    attachmentsDirectory: root.appendingPathComponent("attachments").path)
configuration.syncInterval = .zero
configuration.maxCacheBytes = 400_000
configuration.archivedCacheLimit = 3
if let milliseconds = ProcessInfo.processInfo.environment["ATTACHMENT_SYNC_LEASE_MS"].flatMap(Int.init) {
    configuration.leaseDuration = .milliseconds(milliseconds)
}
let queue = AttachmentQueue(
    db: db, remoteStorage: FileSystemRemoteStorage(directory: root.appendingPathComponent("remote")),
    configuration: configuration)
if arguments.count == 4 {
    // Bounded: startup fails while the folder cannot be read, and is tried again.
    for _ in 0..<3000 {
        if (try? await queue.waitForInit()) != nil { break }
        try await Task.sleep(for: .milliseconds(10))
    }
    let journalPath = root.appendingPathComponent(journalName).path
    if !FileManager.default.fileExists(atPath: journalPath) {
        _ = FileManager.default.createFile(atPath: journalPath, contents: nil)
    }
    try await queue.startSync()
    journal("syncing")
    while true { try await Task.sleep(for: .seconds(1)) }
}
try await queue.waitForInit()

let journalPath = root.appendingPathComponent(journalName).path
if !FileManager.default.fileExists(atPath: journalPath) {
    _ = FileManager.default.createFile(atPath: journalPath, contents: nil)
}
let previous = CrashWorkerFiles.journal(at: journalPath)
var number = CrashWorkerFiles.numbers("prepared", inJournal: previous).max().map { $0 + 1 } ?? 0
var saved = CrashWorkerFiles.numbers("saved", inJournal: previous)

let user = root.appendingPathComponent(name.map { "user-\($0)" } ?? "user")
try FileManager.default.createDirectory(at: user, withIntermediateDirectories: true)
if name != nil, seed % 2 == 0 { try await queue.startSync() }
while true {
    switch next(below: 10) {
    case 0..<5:
        // The app recorded a file; it hands it over.
        let source = user.appendingPathComponent("f\(number).bin")
        try CrashWorkerFiles.content(number).write(to: source)
        journal("prepared \(number)")
        let id = "\(idPrefix)f\(number)"
        let referenced = next(below: 2) == 0
        _ = try await queue.saveFile(fileURL: source, mediaType: nil, id: id, moveFile: true) { tx, attachment in
            if referenced {
                try tx.execute(
                    sql: "INSERT INTO rows (id, attachment_id) VALUES (?, ?)", arguments: [id, attachment.id])
            }
        }
        journal("saved \(number)")
        saved.append(number)
        number += 1
    case 5:
        guard !saved.isEmpty else { continue }
        let victim = saved.remove(at: next(below: saved.count))
        journal("deleting \(victim)")
        _ = try? await queue.deleteFile(attachmentId: "\(idPrefix)f\(victim)") { tx, attachment in
            try tx.execute(sql: "DELETE FROM rows WHERE attachment_id = ?", arguments: [attachment.id])
        }
        journal("deleted \(victim)")
    case 6:
        guard !saved.isEmpty else { continue }
        _ = try? await queue.purge(attachmentId: "\(idPrefix)f\(saved[next(below: saved.count)])")
    default:
        try await queue.syncNow()
    }
}
