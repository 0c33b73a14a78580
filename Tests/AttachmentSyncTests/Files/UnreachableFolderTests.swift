import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// A folder that cannot be read for a while is not a folder without files: what a locked iPhone does to
/// protected files, and a permission change or a failing volume does on Linux, must never make the queue give
/// an upload up, let go of a file or remove it.
@Suite("Unreachable local files", .cleansUp)
struct UnreachableFolderTests {
    /// The uid and gid the worker runs as when the tests run as root (whom permissions do not stop).
    static let nobody: UInt32 = 65534

    @Test(
        "an unprivileged process whose folder is unreadable for a second, then killed, loses and gives up nothing")
    func unprivilegedProcess() async throws {
        let worker = try CommandLineTool.locate("attachment-sync-crash-worker")
        let folder = try TemporaryDirectory()
        let count = 400
        // Saved by the app before: the worker finds them queued for upload.
        do {
            let schema = Schema(tables: [
                Table(name: "rows", columns: [.text("attachment_id")]), createAttachmentTable(),
            ])
            let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: schema)
            var configuration = AttachmentQueue.Configuration(attachmentsDirectory: folder.path("attachments"))
            configuration.syncInterval = .zero
            let queue = AttachmentQueue(
                db: db, remoteStorage: FileSystemRemoteStorage(directory: folder.path("remote")),
                configuration: configuration)
            _ = try await queue.saveFiles(
                (0..<count).map {
                    AttachmentQueue.NewFile(data: Self.content($0), mediaType: nil, fileExtension: "bin", id: "f\($0)")
                }
            ) { _, _ in }
            await queue.close()
            try await db.close()
        }
        try FileManager.default.createDirectory(atPath: folder.path("remote"), withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: folder.path("journal"), contents: nil)
        let asRoot = getuid() == 0
        if asRoot { try Self.giveToNobody(folder.path) }

        let process =
            asRoot
            ? try ChildProcess(
                "/usr/bin/setpriv",
                [
                    "--reuid=\(Self.nobody)", "--regid=\(Self.nobody)", "--clear-groups", worker.url.path, folder.path,
                    "1", "sync",
                ], standardError: .capture())
            : try ChildProcess(worker.url.path, [folder.path, "1", "sync"], standardError: .capture())
        // Never left running, whatever fails below (the thread that waits for it reaps it).
        defer { process.kill() }
        // Bounded waits (60 s at most each) for what the worker does, not for time to pass.
        var syncing = false
        for _ in 0..<6000 where !syncing && process.isRunning {
            syncing = ((try? String(contentsOfFile: folder.path("journal"), encoding: .utf8)) ?? "").contains("syncing")
            if !syncing { try await Task.sleep(for: .milliseconds(10)) }
        }
        guard syncing else {
            process.kill()
            let termination = try await process.wait(seconds: 60)
            Issue.record("the worker did not start syncing (\(termination)): \(process.capturedError)")
            return
        }
        // While the uploads run, the folder becomes unreadable for a second, then readable again.
        let attachments = folder.path("attachments")
        #expect(chmod(attachments, 0) == 0)
        try await Task.sleep(for: .seconds(1))
        #expect(chmod(attachments, 0o755) == 0)
        // Let the uploads finish (or not: the promise holds either way), then kill the process.
        for _ in 0..<6000 where process.isRunning {
            let uploaded =
                (try? FileManager.default.contentsOfDirectory(atPath: folder.path("remote")))?
                .filter { !$0.hasPrefix(".") }.count ?? 0
            if uploaded >= count { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        guard process.isRunning else {
            let termination = try await process.wait(seconds: 60)
            Issue.record("the worker stopped by itself (\(termination)): \(process.capturedError)")
            return
        }
        process.kill()
        let termination = try await process.wait(seconds: 60)
        #expect(
            termination == .signaled(SIGKILL), "the worker \(termination) before the kill: \(process.capturedError)")

        // A new process starts (its startup check runs) and finds every attachment, none given up.
        let schema = Schema(tables: [Table(name: "rows", columns: [.text("attachment_id")]), createAttachmentTable()])
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: schema)
        var configuration = AttachmentQueue.Configuration(attachmentsDirectory: attachments)
        configuration.syncInterval = .zero
        let remote = FileSystemRemoteStorage(directory: folder.path("remote"))
        let queue = AttachmentQueue(db: db, remoteStorage: remote, configuration: configuration)
        try await queue.waitForInit()
        var lost: [String] = []
        var givenUp: [String] = []
        for number in 0..<count {
            let attachment = try #require(try await queue.attachment(id: "f\(number)"))
            if attachment.givenUp != nil { givenUp.append("f\(number)") }
            let local = attachment.localUri.flatMap { FileManager.default.contents(atPath: $0) }
            let remoteCopy = FileManager.default.contents(atPath: try remote.fileURL(for: attachment).path)
            if local != Self.content(number) && remoteCopy != Self.content(number) { lost.append("f\(number)") }
        }
        #expect(lost == [], "lost: \(lost.count) of \(count)")
        #expect(givenUp == [], "given up: \(givenUp.count) of \(count)")
        await queue.close()
        try await db.close()
    }

    /// A queue whose attachments folder a switch takes out of reach (`EACCES` from every file operation in it,
    /// as a folder of mode 000, a failing volume or a locked device's protected data gives).
    func device(_ configure: @escaping (inout AttachmentQueue.Configuration) -> Void = { _ in }) throws -> (
        QueueHarness, AccessSwitch
    ) {
        let folder = try TemporaryDirectory()
        let access = AccessSwitch(folder: folder.path("attachments"))
        let disk = SimulatedDisk(crash: CrashSwitch(), insensitive: false, access: access)
        let device = try QueueHarness(folder: folder, localStorage: FileManagerStorageAdapter(files: disk)) {
            $0.files = disk
            $0.maxAttempts = 1
            $0.retryBackoff = RetryBackoff(initialDelay: .seconds(10), maximumDelay: .seconds(80), jitter: false)
            configure(&$0)
        }
        return (device, access)
    }

    @Test("uploads whose files cannot be reached wait, spend no attempt and give nothing up; then they go")
    func uploadsWait() async throws {
        let (device, access) = try device()
        let remote = try device.memoryRemote
        let photos = try await device.queue.saveFiles(
            (0..<3).map { AttachmentQueue.NewFile(data: testBytes(100 + $0), mediaType: nil, fileExtension: "jpg") }
        ) { _, _ in }
        access.deny(true)
        try await device.queue.syncNow()
        for photo in photos {
            let attachment = try #require(try await device.queue.attachment(id: photo.id))
            #expect(attachment.state == .queuedUpload && attachment.givenUp == nil, "maxAttempts 1 gave nothing up")
            #expect(attachment.localUri == photo.localUri, "the record still claims its file")
            #expect(device.bytesOnDisk(URL(fileURLWithPath: photo.localUri!).lastPathComponent) != nil)
            try await device.waitForColumn("attempts", of: photo.id, toBe: "0")
            try await device.waitForColumn("local_unavailable", of: photo.id, toBe: "1")
        }
        let status = try #require(await device.queue.status.first { _ in true })
        #expect(Set(status.waitingForLocalFiles.map(\.attachmentId)) == Set(photos.map(\.id)))
        #expect(status.givenUp.isEmpty)

        // Still out of reach at the next try: the wait grows, still no attempt.
        await device.clock.advance(by: .seconds(11))
        try await device.queue.syncNow()
        try await device.waitForColumn("local_unavailable", of: photos[0].id, toBe: "2")
        try await device.waitForColumn("attempts", of: photos[0].id, toBe: "0")

        // In reach again: the first that goes brings the others along at once.
        access.deny(false)
        await device.clock.advance(by: .seconds(21))
        try await device.queue.syncNow()
        for (index, photo) in photos.enumerated() {
            try await device.waitForState(photo.id, .synced)
            #expect(await remote.file(named: photo.filename) == testBytes(100 + index))
        }
    }

    @Test("files out of reach pause the queue like an offline one: one try per trigger, then all go once it works")
    func outOfReachPausesTheQueue() async throws {
        let (device, access) = try device { $0.maxConcurrentTransfers = 1 }
        let remote = try device.memoryRemote
        let photos = try await device.queue.saveFiles(
            (0..<4).map { AttachmentQueue.NewFile(data: testBytes(200 + $0), mediaType: nil, fileExtension: "jpg") }
        ) { _, _ in }
        // The device locks: protected files cannot be read.
        access.deny(true)
        try await device.queue.syncNow()
        #expect(try await tried(photos, device) == [photos[0].id], "after one could not reach its file, none")
        let paused = try #require(await device.queue.status.first { _ in true })
        #expect(paused.isPausedForLocalFiles)
        #expect(paused.givenUp.isEmpty)

        // Each trigger tries one more, to find out whether the files are back.
        try await device.queue.syncNow()
        #expect(try await tried(photos, device) == [photos[0].id, photos[1].id])

        // Unlocked: the next try works, and everything goes at once, the waiting ones too.
        access.deny(false)
        try await device.queue.syncNow()
        for (index, photo) in photos.enumerated() {
            try await device.waitForState(photo.id, .synced)
            #expect(await remote.file(named: photo.filename) == testBytes(200 + index))
        }
        let resumed = try #require(await device.queue.status.first { !$0.isPausedForLocalFiles })
        #expect(resumed.waitingForLocalFiles.isEmpty)
    }

    /// The ids among `photos` whose transfer has tried and failed to reach its file, in their order.
    func tried(_ photos: [AttachmentSync.Attachment], _ device: QueueHarness) async throws -> [String] {
        let store = AttachmentStore(table: "attachments")
        let records = try await device.db.readTransaction { tx in try store.records(ids: Set(photos.map(\.id)), in: tx)
        }
        let waiting = Set(records.filter { ($0.localUnavailable ?? 0) > 0 }.map(\.id))
        #expect(records.allSatisfy { $0.attempts == 0 && $0.givenUp == nil })
        return photos.map(\.id).filter(waiting.contains)
    }

    @Test("a folder out of reach at startup fails the startup, changes nothing, and the next call succeeds")
    func startupWaits() async throws {
        let (device, access) = try device()
        let photo = try await device.queue.saveFile(data: testBytes(64), mediaType: nil, fileExtension: "jpg")
        await device.queue.close()
        let again = try QueueHarness(
            folder: device.folder,
            localStorage: FileManagerStorageAdapter(files: device.configuration.files)
        ) { $0.files = device.configuration.files }
        access.deny(true)
        let failed = await #expect(throws: AttachmentError.self) { try await again.queue.waitForInit() }
        #expect(failed?.code == .fileSystem, "\(String(describing: failed))")
        access.deny(false)
        try await again.queue.waitForInit()
        let attachment = try #require(try await again.queue.attachment(id: photo.id))
        #expect(attachment.state == .queuedUpload && attachment.givenUp == nil && attachment.localUri != nil)
        try await again.queue.syncNow()
        try await again.waitForState(photo.id, .synced)
    }

    @Test("a download whose folder cannot be written waits without an attempt and lands once it can")
    func downloadsWait() async throws {
        let (device, access) = try device { $0.downloadAttachments = true }
        let remote = try device.memoryRemote
        await remote.setFile(testBytes(300), named: "r1.jpg")
        try await device.queue.waitForInit()
        access.deny(true)
        await device.queue.reconcile([try WatchedAttachmentItem(id: "r1", fileExtension: "jpg")])
        try await device.queue.syncNow()
        try await device.waitForColumn("local_unavailable", of: "r1", toBe: "1")
        let waiting = try #require(try await device.queue.attachment(id: "r1"))
        #expect(waiting.state == .queuedDownload && waiting.givenUp == nil)
        try await device.waitForColumn("attempts", of: "r1", toBe: "0")
        access.deny(false)
        await device.clock.advance(by: .seconds(11))
        try await device.queue.syncNow()
        try await device.waitForState("r1", .synced)
        let synced = try #require(try await device.queue.attachment(id: "r1"))
        #expect(synced.localUri.flatMap { FileManager.default.contents(atPath: $0) } == testBytes(300))
    }

    /// File `n`'s bytes: small and distinct.
    static func content(_ n: Int) -> Data {
        Data("attachment \(n) ".utf8) + testBytes(200 + n % 50)
    }

    /// Hands the folder and everything in it to the unprivileged user.
    static func giveToNobody(_ path: String) throws {
        var paths = [path]
        if let enumerator = FileManager.default.enumerator(atPath: path) {
            for case let relative as String in enumerator {
                paths.append((path as NSString).appendingPathComponent(relative))
            }
        }
        for item in paths where lchown(item, nobody, nobody) != 0 {
            throw HarnessError("cannot hand \(item) to uid \(nobody): \(String(cString: strerror(errno)))")
        }
    }
}
