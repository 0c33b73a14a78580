import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// One process at a time per attachments directory: a second process's queue would remove the files of
/// saves the first has not committed yet (their only copy), so it must refuse to start instead.
@Suite("Attachments directory lock", .cleansUp)
struct DirectoryLockTests {
    @Test("a queue in another process holds the directory: this one refuses to start and touches nothing")
    func anotherProcessLocksOut() async throws {
        let worker = try CommandLineTool.locate("attachment-sync-crash-worker")
        let folder = try TemporaryDirectory()
        let process = try ChildProcess(worker.url.path, [folder.path, "7"])
        // Never left running, whatever fails below (the thread that waits for it reaps it).
        defer { process.kill() }
        // The worker creates its journal once its queue has started (and holds the lock).
        try await withDeadline("the worker's queue starting") {
            for _ in 0..<6_000 where !FileManager.default.fileExists(atPath: folder.path("journal")) {
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        #expect(FileManager.default.fileExists(atPath: folder.path("journal")))
        // A stray file named like a generated attachment: a startup that ran would remove it.
        let stray = folder.path("attachments/00000000-0000-4000-8000-000000000000.jpg")
        try Data("the other process's save in progress".utf8).write(to: URL(fileURLWithPath: stray))

        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: QueueHarness.schema)
        let queue = AttachmentQueue(
            db: db, remoteStorage: InMemoryRemoteStorage(),
            configuration: AttachmentQueue.Configuration(attachmentsDirectory: folder.path("attachments")))
        let refused = await #expect(throws: AttachmentError.self) { try await queue.waitForInit() }
        #expect(refused?.code == .directoryInUse)
        #expect(refused?.message.contains("another process") == true)
        #expect(FileManager.default.fileExists(atPath: stray), "the refused queue removed a file")
        await queue.close()

        process.kill()
        #expect(try await process.wait(seconds: 60) == .signaled(SIGKILL))
        // The kernel released the dead process's lock: a queue starts (and its startup cleans up).
        let reopened = AttachmentQueue(
            db: db, remoteStorage: InMemoryRemoteStorage(),
            configuration: AttachmentQueue.Configuration(attachmentsDirectory: folder.path("attachments")))
        try await reopened.waitForInit()
        #expect(!FileManager.default.fileExists(atPath: stray))
        await reopened.close()
        try await db.close()
    }

    @Test("queues in one process share the lock, and it is free again once they are closed")
    func oneProcessShares() async throws {
        let first = try QueueHarness()
        let second = try QueueHarness(folder: first.folder)
        try await first.queue.waitForInit()
        try await second.queue.waitForInit()
        let lock = first.folder.path("attachments")
        #expect(try first.filesOnDisk().isEmpty, "the lock writes no file")
        await first.queue.close()
        // flock locks belong to open file descriptions: a new one of the file stands for another process.
        #expect(try Self.canTake(lock) == false, "the lock is still held for the second queue")
        await second.queue.close()
        #expect(try Self.canTake(lock), "closing the last queue releases the lock")
    }

    /// Whether an exclusive `flock` on a new descriptor of the directory `path` succeeds (and then lets it go).
    static func canTake(_ path: String) throws -> Bool {
        let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        defer { close(descriptor) }
        return flock(descriptor, LOCK_EX | LOCK_NB) == 0
    }
}
