import AttachmentSync
import AttachmentSyncHTTP
import AttachmentSyncTesting
import Foundation
import TestSupport

// attachment-sync-handoff-app ROOT BUCKET COUNT
//
// The app of the hand-off crash test (Tests/AttachmentSyncS3Tests/Background/HandOffCrashTests.swift), which
// kills it with SIGKILL at random moments. It keeps its database, attachments and the spool of the
// background service (SpoolTransferService; the service process runs beside it and outlives it) under ROOT,
// saves COUNT files (u-…) referred to by rows, adds rows referring to COUNT files another device stored
// (d-…), and syncs with every transfer handed to the service, until it is killed. Each run goes on from
// what the database holds. It talks to Ceph (the ATTACHMENT_SYNC_S3_* variables, bucket BUCKET) over the
// URLSession transport, as an iOS app would. Events go to ROOT/events, one line each, written whole.

let arguments = CommandLine.arguments
guard arguments.count == 4, let count = Int(arguments[3]) else {
    FileHandle.standardError.write(Data("usage: attachment-sync-handoff-app ROOT BUCKET COUNT\n".utf8))
    exit(2)
}
let root = URL(fileURLWithPath: arguments[1])
let environment = ProcessInfo.processInfo.environment

func log(_ line: String) {
    let path = root.appendingPathComponent("events").path
    if !FileManager.default.fileExists(atPath: path) { _ = FileManager.default.createFile(atPath: path, contents: nil) }
    let handle = FileHandle(forWritingAtPath: path)!
    handle.seekToEndOfFile()
    handle.write(Data((line + "\n").utf8))
    handle.closeFile()
}

var s3 = S3RemoteStorage.Configuration(
    endpoint: URL(string: environment["ATTACHMENT_SYNC_S3_ENDPOINT"] ?? "http://127.0.0.1:7480")!,
    region: environment["ATTACHMENT_SYNC_S3_REGION"] ?? "us-east-1", bucket: arguments[2],
    credentials: .static(
        accessKeyId: environment["ATTACHMENT_SYNC_S3_ACCESS_KEY"] ?? "ATTACHMENTSYNCTEST0001",
        secretAccessKey: environment["ATTACHMENT_SYNC_S3_SECRET_KEY"] ?? "attachment-sync-test-secret-0000000000001"))
s3.stateDirectory = root.appendingPathComponent("s3-state")
let remote = try S3RemoteStorage(configuration: s3, transport: .urlSession())

let schema = Schema(tables: [
    Table(name: "checklists", columns: [.text("photo_id")]), createAttachmentTable(name: "attachments"),
])
let db = try LocalDatabase(path: root.appendingPathComponent("app.sqlite").path, schema: schema)
try await db.writeTransaction { tx in
    for id in HandOffAppFiles.downloadIds(count) {
        _ = try tx.execute(
            sql: "INSERT OR IGNORE INTO checklists (id, photo_id) VALUES (?, ?)", arguments: ["row-" + id, id])
    }
}

var configuration = AttachmentQueue.Configuration(
    attachmentsDirectory: root.appendingPathComponent("attachments").path)
configuration.syncInterval = .seconds(1)
configuration.syncThrottleDuration = .milliseconds(20)
configuration.retryBackoff = RetryBackoff(initialDelay: .milliseconds(200), maximumDelay: .seconds(1))
configuration.leaseDuration = .seconds(2)
var background = BackgroundTransfers(service: try SpoolTransferService(folder: root.appendingPathComponent("spool")))
// A hand-off recorded by a run killed before it handed it over is taken back after this long.
background.recoveryDelay = .seconds(2)
configuration.backgroundTransfers = background

let queue = AttachmentQueue(
    db: db, remoteStorage: remote, configuration: configuration,
    watchAttachments: {
        try db.watch(
            options: WatchOptions(
                sql: "SELECT photo_id FROM checklists", parameters: [],
                mapper: { try WatchedAttachmentItem(id: $0.getString(name: "photo_id"), fileExtension: "jpg") }))
    })
let events = Task {
    for await event in queue.events {
        switch event {
        case .uploaded(let id, _): log("uploaded \(id)")
        case .downloaded(let id, _): log("downloaded \(id)")
        case .handedOff(let id): log("handed-off \(id)")
        case .failed(let id, let error, _, _): log("failed \(id) \(error.code)")
        case .gaveUp(let id, _, _), .archived(let id): log("lost \(id)")
        default: break
        }
    }
}
try await queue.startSync()
log("started")
for id in HandOffAppFiles.uploadIds(count) {
    let known = try await db.readTransaction { tx in
        try tx.getOptional(sql: "SELECT id FROM attachments WHERE id = ?", parameters: [id]) { _ in true } ?? false
    }
    if known { continue }
    _ = try await queue.saveFile(
        data: HandOffAppFiles.content(of: id), mediaType: "image/jpeg", fileExtension: "jpg", id: id
    ) { tx, attachment in
        _ = try tx.execute(
            sql: "INSERT INTO checklists (id, photo_id) VALUES (?, ?)", arguments: ["row-" + id, attachment.id])
    }
}
log("saved")
// Until killed (bounded all the same: an hour).
try await Task.sleep(for: .seconds(3600))
events.cancel()
