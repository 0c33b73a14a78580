import AttachmentSync
import AttachmentSyncS3
import Foundation
import TestSupport

/// One device for the queue-over-S3 tests: a real SQLite file with a checklist table whose rows refer to
/// photos, a real attachments folder, and an ``AttachmentQueue`` over an ``S3RemoteStorage`` adapter, on the
/// real clock.
final class S3QueueDevice: Sendable {
    static let schema = Schema(tables: [
        Table(name: "checklists", columns: [.text("description"), .integer("completed"), .text("photo_id")]),
        createAttachmentTable(name: "attachments"),
    ])

    let folder: URL
    let db: LocalDatabase
    let queue: AttachmentQueue

    private init(folder: URL, db: LocalDatabase, queue: AttachmentQueue) {
        self.folder = folder
        self.db = db
        self.queue = queue
    }

    /// Adds a checklist row that refers to `photo`.
    func addChecklist(_ id: String, photo: String?) async throws {
        _ = try await db.execute(
            sql: "INSERT INTO checklists (id, description, completed, photo_id) VALUES (?, ?, 1, ?)",
            parameters: [id, "item \(id)", photo])
    }

    /// Saves `content` as a JPEG photo that the new checklist row `checklist` refers to, in one transaction.
    func savePhoto(_ content: Data, checklist: String) async throws -> AttachmentSync.Attachment {
        try await queue.saveFile(data: content, mediaType: "image/jpeg", fileExtension: "jpg") { tx, attachment in
            _ = try tx.execute(
                sql: "INSERT INTO checklists (id, photo_id) VALUES (?, ?)", arguments: [checklist, attachment.id])
        }
    }

    /// The bytes of `name` in the attachments folder, or `nil` when there is no such file.
    func bytesOnDisk(_ name: String) -> Data? {
        FileManager.default.contents(atPath: queue.attachmentsDirectory.appendingPathComponent(name).path)
    }

    /// Waits, through a watch on the table rather than by sleeping, until the attachment is in `state`
    /// (`nil`: until its record is gone).
    func waitForState(_ id: String, _ state: AttachmentState?, seconds: Double = 60) async throws {
        let states = try db.watch(sql: "SELECT state FROM attachments WHERE id = ?", parameters: [id]) {
            try $0.getInt(name: "state")
        }
        let expected = state.map { [$0.rawValue] } ?? []
        _ = try await withDeadline(seconds: seconds, "attachment \(id) to reach \(String(describing: state))") {
            for try await rows in states where rows == expected {
                return true
            }
            throw StreamEnded(what: "attachment \(id) reached \(String(describing: state))")
        }
    }
}

extension S3QueueDevice {
    /// Runs `body` with a device in `folder` over `storage`, then closes its queue and database whatever
    /// happened.
    ///
    /// The device opens `folder/app.sqlite` and has a queue (not started) that follows the checklists'
    /// photos, as `.jpg` files. The periodic pass is short and retries wait little, so a missed trigger or a
    /// transient failure costs a second, not the test's deadline; `configure` changes the rest.
    static func with<T>(
        folder: URL, storage: any RemoteStorageAdapter,
        configure: (inout AttachmentQueue.Configuration) -> Void = { _ in },
        _ body: (S3QueueDevice) async throws -> T
    ) async throws -> T {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let db = try LocalDatabase(path: folder.appendingPathComponent("app.sqlite").path, schema: Self.schema)
        var configuration = AttachmentQueue.Configuration(
            attachmentsDirectory: folder.appendingPathComponent("attachments", isDirectory: true).path)
        configuration.syncInterval = .seconds(1)
        configuration.syncThrottleDuration = .milliseconds(20)
        configuration.retryBackoff = RetryBackoff(initialDelay: .milliseconds(200), maximumDelay: .seconds(1))
        configure(&configuration)
        let result: Result<T, any Error>
        do {
            result = .success(
                try await withAttachmentQueue(
                    db: db, remoteStorage: storage, configuration: configuration,
                    watchAttachments: {
                        try db.watch(
                            options: WatchOptions(
                                sql: "SELECT photo_id FROM checklists WHERE photo_id IS NOT NULL",
                                parameters: [],
                                mapper: { cursor in
                                    try WatchedAttachmentItem(
                                        id: cursor.getString(name: "photo_id"), fileExtension: "jpg")
                                }))
                    }
                ) { queue in
                    try await body(S3QueueDevice(folder: folder, db: db, queue: queue))
                })
        } catch {
            result = .failure(error)
        }
        try? await db.close()
        return try result.get()
    }
}

extension S3TestBucket {
    /// Runs `body` with a new adapter for this bucket (another device's, say), then shuts it down whatever
    /// happened.
    func withStorage<T>(
        _ configure: (inout S3RemoteStorage.Configuration) -> Void = { _ in },
        _ body: (S3RemoteStorage) async throws -> T
    ) async throws -> T {
        let storage = try makeStorage(configure)
        do {
            let result = try await body(storage)
            try await storage.shutdown()
            return result
        } catch {
            try? await storage.shutdown()
            throw error
        }
    }
}
