import AttachmentSync
import AttachmentSyncTesting
import Foundation
import TestSupport

/// One device for queue tests: a real SQLite file with the seed's checklist schema, a real attachments
/// folder, a remote (in memory unless given), a manual clock, and a queue over them.
///
/// With `watch: true` the queue follows the checklists' photos as the seed docs show; then a saved file
/// that no checklist refers to is archived once uploaded, as it should be. Tests about uploads alone
/// leave the watch off.
final class QueueHarness: Sendable {
    let folder: TemporaryDirectory
    let db: LocalDatabase
    let remote: any RemoteStorageAdapter
    let clock: ManualClock
    let queue: AttachmentQueue
    let configuration: AttachmentQueue.Configuration

    static let schema = Schema(tables: [
        Table(name: "checklists", columns: [.text("description"), .integer("completed"), .text("photo_id")]),
        createAttachmentTable(name: "attachments"),
    ])

    /// The watch the seed docs show: every checklist's photo, as a jpg.
    static func watchPhotos(_ db: LocalDatabase)
        -> @Sendable () throws -> AsyncThrowingStream<
            [WatchedAttachmentItem], any Error
        >
    {
        {
            try db.watch(
                options: WatchOptions(
                    sql: "SELECT photo_id FROM checklists WHERE photo_id IS NOT NULL",
                    parameters: [],
                    mapper: { cursor in
                        try WatchedAttachmentItem(id: cursor.getString(name: "photo_id"), fileExtension: "jpg")
                    }
                ))
        }
    }

    init(
        watch: Bool = false,
        folder: TemporaryDirectory? = nil,
        remote: (any RemoteStorageAdapter)? = nil,
        localStorage: any LocalStorageAdapter = FileManagerStorageAdapter(),
        errorHandler: (any SyncErrorHandler)? = nil,
        customWatch: CustomWatch? = nil,
        configure: (inout AttachmentQueue.Configuration) -> Void = { _ in }
    ) throws {
        let folder = try folder ?? TemporaryDirectory()
        self.folder = folder
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: Self.schema)
        self.db = db
        self.remote = remote ?? InMemoryRemoteStorage()
        clock = ManualClock()
        var configuration = AttachmentQueue.Configuration(attachmentsDirectory: folder.path("attachments"))
        configuration.clock = clock
        configuration.currentDate = { [clock] in clock.date }
        configuration.syncInterval = .zero
        configuration.syncThrottleDuration = .zero
        // No backoff unless a test asks for it: a failure then waits only for the next trigger.
        configuration.retryBackoff = RetryBackoff(initialDelay: .zero, maximumDelay: .zero, jitter: false)
        configure(&configuration)
        self.configuration = configuration
        queue = AttachmentQueue(
            db: db,
            remoteStorage: self.remote,
            configuration: configuration,
            watchAttachments: customWatch.map { $0.make(db) } ?? (watch ? Self.watchPhotos(db) : nil),
            localStorage: localStorage,
            errorHandler: errorHandler
        )
        TestCleanup.add { [self] in await self.close() }
    }

    var memoryRemote: InMemoryRemoteStorage {
        get throws {
            guard let remote = remote as? InMemoryRemoteStorage else { throw HarnessError("not an in-memory remote") }
            return remote
        }
    }

    var attachmentsPath: String { configuration.attachmentsDirectory }

    /// The names in the attachments folder.
    func filesOnDisk() throws -> Set<String> {
        Set(try FileManager.default.contentsOfDirectory(atPath: attachmentsPath))
    }

    func bytesOnDisk(_ name: String) -> Data? {
        FileManager.default.contents(atPath: (attachmentsPath as NSString).appendingPathComponent(name))
    }

    func state(of id: String) async throws -> AttachmentState? {
        try await db.getOptional(sql: "SELECT state FROM attachments WHERE id = ?", parameters: [id]) {
            AttachmentState(rawValue: try $0.getInt(name: "state"))
        } ?? nil
    }

    /// Waits (reading the table through a watch, not by sleeping) until the attachment reaches `state`;
    /// `nil` waits for the record to be gone.
    func waitForState(_ id: String, _ state: AttachmentState?, seconds: Double = 30) async throws {
        let states = try db.watch(sql: "SELECT state FROM attachments WHERE id = ?", parameters: [id]) {
            try $0.getInt(name: "state")
        }
        let expected = state.map { [$0.rawValue] } ?? []
        _ = try await withDeadline(seconds: seconds, "attachment \(id) to reach \(String(describing: state))") {
            try await states.first { $0 == expected }
        }
    }

    /// Waits (through a watch of the table, not by sleeping) until `column` of attachment `id` holds `value`
    /// (`nil`: SQL NULL); `recordGone` also accepts the record being gone.
    func waitForColumn(
        _ column: String, of id: String, toBe value: String?, orGone recordGone: Bool = false, seconds: Double = 30
    ) async throws {
        let values = try db.watch(
            sql: "SELECT CAST(\(column) AS TEXT) AS value FROM attachments WHERE id = ?", parameters: [id]
        ) { [try $0.getStringOptional(name: "value")] }
        _ = try await withDeadline(seconds: seconds, "\(column) of \(id) to be \(value ?? "NULL")") {
            try await values.first { rows in rows == [[value]] || (recordGone && rows.isEmpty) }
        }
    }

    /// Waits (through a watch) until attachment `id` has a record.
    func waitForRecord(_ id: String, seconds: Double = 30) async throws {
        let counts = try db.watch(sql: "SELECT count(*) AS n FROM attachments WHERE id = ?", parameters: [id]) {
            try $0.getInt(name: "n")
        }
        _ = try await withDeadline(seconds: seconds, "a record for \(id)") { try await counts.first { $0 == [1] } }
    }

    /// Holds the in-memory remote, saves a file and starts sync, returning once that upload is stuck in
    /// flight.
    func startStuckUpload() async throws -> AttachmentSync.Attachment {
        let remote = try memoryRemote
        await remote.hold()
        let saved = try await queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        try await queue.startSync()
        await remote.waitForInFlight(count: 1)
        return saved
    }

    func addChecklist(_ id: String, photo: String?) async throws {
        try await db.execute(
            sql: "INSERT INTO checklists (id, description, completed, photo_id) VALUES (?, ?, 0, ?)",
            parameters: [id, "item \(id)", photo])
    }

    func setPhoto(checklist: String, photo: String?) async throws {
        try await db.execute(sql: "UPDATE checklists SET photo_id = ? WHERE id = ?", parameters: [photo, checklist])
    }

    func close() async {
        await queue.close()
        try? await db.close()
    }
}

/// A watch other than the seed's, made from the harness's database. (A struct, not a closure, so that a
/// trailing closure still goes to the harness's `configure`.)
struct CustomWatch: Sendable {
    let make:
        @Sendable (LocalDatabase) -> @Sendable () throws -> AsyncThrowingStream<[WatchedAttachmentItem], any Error>
}

struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Deterministic test bytes.
func testBytes(_ count: Int, seed: UInt8 = 1) -> Data {
    Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) })
}
