import AttachmentSyncTesting
import Foundation
import GRDB

@testable import AttachmentSync

/// One device whose process can be killed at an exact durable operation (see ``CrashSwitch``) and started
/// again on the same database and folders: a real SQLite file, a real attachments folder (on an APFS-like
/// volume when `insensitive`), and the model's remote.
final class CrashHarness {
    let root: URL
    let store = RemoteStore()
    let clock = ManualClock()
    let insensitive: Bool
    let configure: (inout AttachmentQueue.Configuration) -> Void
    private(set) var crash = CrashSwitch()
    private(set) var disk: SimulatedDisk
    private(set) var db: LocalDatabase!
    private(set) var queue: AttachmentQueue!

    static let schema = Schema(tables: [
        Table(name: "rows", columns: [.text("attachment_id"), .text("filename")]),
        createAttachmentTable(name: "attachments"),
    ])

    var attachments: String { root.appendingPathComponent("attachments").path }
    var userFolder: String { root.appendingPathComponent("user").path }

    init(insensitive: Bool = false, configure: @escaping (inout AttachmentQueue.Configuration) -> Void = { _ in })
        throws
    {
        root = FileManager.default.temporaryDirectory.appendingPathComponent(
            "attachment-sync-crash-\(UUID().uuidString)")
        try FileManager.default.createDirectory(
            at: root.appendingPathComponent("user"), withIntermediateDirectories: true)
        self.insensitive = insensitive
        self.configure = configure
        disk = SimulatedDisk(crash: crash, insensitive: insensitive)
    }

    deinit {
        try? FileManager.default.removeItem(at: root)
    }

    /// Starts the process (again): a fresh crash switch, database connection and queue; startup runs.
    func open() async throws {
        crash = CrashSwitch()
        disk = SimulatedDisk(crash: crash, insensitive: insensitive)
        let pool = try DatabasePool(path: root.appendingPathComponent("app.sqlite").path)
        pool.add(transactionObserver: CommitGate(crash), extent: .databaseLifetime)
        db = try LocalDatabase(writer: pool, schema: Self.schema)
        var configuration = AttachmentQueue.Configuration(attachmentsDirectory: attachments)
        configuration.clock = clock
        configuration.currentDate = { [clock] in clock.date }
        configuration.syncInterval = .zero
        configuration.syncThrottleDuration = .zero
        configuration.retryBackoff = RetryBackoff(initialDelay: .zero, maximumDelay: .zero, jitter: false)
        configuration.files = disk
        configure(&configuration)
        queue = AttachmentQueue(
            db: db, remoteStorage: ModelRemote(store: store, disk: disk), configuration: configuration,
            localStorage: FileManagerStorageAdapter(files: disk))
        try await queue.waitForInit()
    }

    /// The process stops (dead already if the switch fired) and starts again.
    func restart() async throws {
        await queue.close()
        try await db.close()
        try await open()
    }

    /// Opens the device, runs `body`, and closes it however `body` ends.
    func use(_ body: (CrashHarness) async throws -> Void) async throws {
        do {
            try await open()
            try await body(self)
        } catch {
            await close()
            throw error
        }
        await close()
    }

    func close() async {
        await queue?.close()
        try? await db?.close()
    }

    func record(_ id: String) async throws -> AttachmentRecord? {
        let store = AttachmentStore(table: "attachments")
        return try await db.readTransaction { tx in try store.record(id: id, in: tx) }
    }

    /// The bytes of a file in the attachments folder, read as the process's volume resolves the name.
    func localBytes(_ relative: String) -> Data? {
        FileManager.default.contents(atPath: disk.resolve((attachments as NSString).appendingPathComponent(relative)))
    }

    /// The names in the attachments folder.
    func filesInAttachments() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: attachments).sorted()
    }

    /// A file the app wrote, outside the attachments folder.
    func userFile(_ name: String, _ data: Data) throws -> URL {
        let url = URL(fileURLWithPath: userFolder).appendingPathComponent(name)
        try data.write(to: url)
        return url
    }

    /// Runs `operation` with the process killed at its `k`-th durable operation, for k = 1, 2, 3… until
    /// it completes without reaching the crash; after each crash the device restarts and `verify` looks.
    /// Each round starts from a fresh device made by `make`. Returns how many crash points were tried.
    @discardableResult
    static func crashAtEveryPoint(
        limit: Int = 200,
        make: () async throws -> CrashHarness,
        operation: (CrashHarness) async throws -> Void,
        verify: (CrashHarness, _ crashed: Bool) async throws -> Void
    ) async throws -> Int {
        for point in 1...limit {
            let device = try await make()
            device.crash.arm(after: point)
            do { try await operation(device) } catch {}
            let crashed = device.crash.hasCrashed
            device.crash.disarm()
            try await device.restart()
            try await verify(device, crashed)
            await device.close()
            if !crashed { return point - 1 }
        }
        throw HarnessError("the operation still reached a crash point after \(limit) of them")
    }
}
