import Foundation
import GRDB
import Logging

/// A local SQLite database with a PowerSync-shaped API: a ``Schema``, SQL with parameters, watched queries
/// and transactions. It holds the app's own rows and the attachment queue's table, so both change in one
/// transaction.
///
/// It runs on GRDB, on Linux and Apple platforms alike. A file database uses WAL mode with concurrent
/// readers; an app that already has a GRDB `DatabasePool` or `DatabaseQueue` hands it over with
/// ``init(writer:schema:configuration:)``.
///
/// ```swift
/// let schema = Schema(tables: [
///     Table(name: "checklists", columns: [.text("description"), .integer("completed"), .text("photo_id")]),
///     createAttachmentTable(name: "attachments"),
/// ])
/// let db = try LocalDatabase(path: "/path/to/app.sqlite", schema: schema)
/// try await db.execute(
///     sql: "INSERT INTO checklists (id, description, completed) VALUES (?, ?, ?)",
///     parameters: [UUID().uuidString, "Check the fire exits", false]
/// )
/// ```
///
/// Opening applies the schema: missing tables, columns and indexes are created; nothing is dropped or
/// rewritten. Every method is safe to call from any task.
public final class LocalDatabase: Sendable {
    /// The GRDB connection (a `DatabasePool`, or a `DatabaseQueue` for in-memory databases), for apps that
    /// want GRDB's own API next to this one.
    public let writer: any DatabaseWriter
    /// The schema applied when the database was opened.
    public let schema: Schema
    /// The database file's path, or `nil` for an in-memory database or an adopted writer.
    public let path: String?

    let state = LockedValue(State())
    /// A private read-only connection that only checks SQL (for `watch`). It is used synchronously and
    /// never held across a suspension, so waiting for it cannot deadlock with async database work, which
    /// holds pool connections until it resumes on Swift's cooperative threads. `nil` when the writer is
    /// a `DatabaseQueue`, whose queue never waits on those threads and can check SQL itself.
    let sqlChecker: DatabaseQueue?
    /// Notifications of watches run here, off the database's own queues.
    let watchQueue = DispatchQueue(label: "AttachmentSync.LocalDatabase.watch")
    /// Blocking work (closing) runs here: a serial queue gets a thread of its own, so it never ties up
    /// the few threads of Swift's cooperative pool, on which pending reads must resume to let go of their
    /// connections.
    let blockingQueue = DispatchQueue(label: "AttachmentSync.LocalDatabase.blocking")

    /// ``Configuration/otherProcessesCheckInterval``.
    let otherProcessesCheckInterval: Duration?
    /// ``Configuration/clock``.
    let clock: any Clock<Duration>

    struct State: Sendable {
        var isClosed = false
        /// Whether the task that looks for other processes' commits runs.
        var followsOtherProcesses = false
        var nextWatchID = 0
        var watches: [Int: RegisteredWatch] = [:]
    }

    struct RegisteredWatch: Sendable {
        let cancellable: AnyDatabaseCancellable
        let finish: @Sendable () -> Void
    }

    /// Opens (creating it if needed) the database file at `path` in WAL mode, and applies `schema`.
    ///
    /// Missing parent folders are created.
    ///
    /// - Throws: ``LocalDatabaseError`` with code ``LocalDatabaseError/Code-swift.struct/invalidPath`` when
    ///   the path is empty or its folder cannot be created, ``LocalDatabaseError/Code-swift.struct/invalidIdentifier``
    ///   or ``LocalDatabaseError/Code-swift.struct/invalidSchema`` for a bad schema, and
    ///   ``LocalDatabaseError/Code-swift.struct/sqlError`` when SQLite cannot open the file.
    public convenience init(path: String, schema: Schema, configuration: Configuration = Configuration()) throws {
        try schema.validate()
        guard !path.isEmpty, path != ":memory:" else {
            throw LocalDatabaseError(
                code: .invalidPath,
                message:
                    "a database path must name a file; use LocalDatabase.inMemory(schema:) for an in-memory database",
                path: path
            )
        }
        let folder = URL(fileURLWithPath: path).deletingLastPathComponent()
        do {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        } catch {
            throw LocalDatabaseError(
                code: .invalidPath,
                message: "cannot create the folder \(String(reflecting: folder.path)) for the database: "
                    + error.localizedDescription,
                path: path,
                underlying: error
            )
        }
        var grdbConfiguration = GRDB.Configuration()
        grdbConfiguration.label = "AttachmentSync.LocalDatabase"
        grdbConfiguration.busyMode = .timeout(configuration.busyTimeout)
        grdbConfiguration.maximumReaderCount = configuration.maximumReaderCount
        Self.checkpointWithFullFlush(&grdbConfiguration)
        let pool = try Self.opening(path) { try DatabasePool(path: path, configuration: grdbConfiguration) }
        try self.init(validatedWriter: pool, schema: schema, path: path, configuration: configuration)
    }

    /// Adopts an app's existing GRDB `DatabasePool` or `DatabaseQueue` and applies `schema` to it.
    ///
    /// The app keeps using the writer for its own GRDB code; watches of this database see its writes and
    /// the other way round. `close()` closes the writer.
    public convenience init(
        writer: any DatabaseWriter,
        schema: Schema,
        configuration: Configuration = Configuration()
    ) throws {
        try schema.validate()
        try self.init(validatedWriter: writer, schema: schema, path: nil, configuration: configuration)
    }

    /// Opens a new, empty in-memory database with `schema` applied. It disappears when closed or released;
    /// use it in tests and previews.
    public static func inMemory(schema: Schema, configuration: Configuration = Configuration()) throws -> LocalDatabase
    {
        try schema.validate()
        var grdbConfiguration = GRDB.Configuration()
        grdbConfiguration.label = "AttachmentSync.LocalDatabase.inMemory"
        let queue = try LocalDatabaseError.converting { try DatabaseQueue(configuration: grdbConfiguration) }
        return try LocalDatabase(validatedWriter: queue, schema: schema, path: nil, configuration: configuration)
    }

    /// Opens the existing database file at `path` for reading only: no schema is applied and nothing is
    /// ever written (writes fail with ``LocalDatabaseError/Code-swift.struct/sqlError``). For tools that
    /// inspect an app's database, even while the app runs: each read is a short transaction and holds no
    /// lock against the app's writes (in WAL mode).
    ///
    /// ```swift
    /// let db = try LocalDatabase.readOnly(path: "app.sqlite")
    /// let report = try await AttachmentTableReport.read(from: db)
    /// ```
    ///
    /// - Throws: ``LocalDatabaseError`` with code ``LocalDatabaseError/Code-swift.struct/invalidPath`` when
    ///   no file is at `path`, ``LocalDatabaseError/Code-swift.struct/sqlError`` when SQLite cannot open it.
    public static func readOnly(path: String, configuration: Configuration = Configuration()) throws -> LocalDatabase {
        try requireFile(path)
        var grdbConfiguration = GRDB.Configuration()
        grdbConfiguration.label = "AttachmentSync.LocalDatabase.readOnly"
        grdbConfiguration.readonly = true
        grdbConfiguration.busyMode = .timeout(configuration.busyTimeout)
        let queue = try opening(path) { try DatabaseQueue(path: path, configuration: grdbConfiguration) }
        return try LocalDatabase(
            validatedWriter: queue, schema: Schema(tables: []), path: path, configuration: configuration,
            applyingSchema: false)
    }

    /// Opens the existing database file at `path` for reading and writing, without applying a schema: for
    /// tools that change an app's attachments through a queue (`attachment-sync verify --repair`) and must
    /// leave every table as the app made it.
    ///
    /// - Throws: ``LocalDatabaseError`` with code ``LocalDatabaseError/Code-swift.struct/invalidPath`` when
    ///   no file is at `path`, ``LocalDatabaseError/Code-swift.struct/sqlError`` when SQLite cannot open it.
    public static func existing(path: String, configuration: Configuration = Configuration()) throws -> LocalDatabase {
        try requireFile(path)
        var grdbConfiguration = GRDB.Configuration()
        grdbConfiguration.label = "AttachmentSync.LocalDatabase.existing"
        grdbConfiguration.busyMode = .timeout(configuration.busyTimeout)
        grdbConfiguration.maximumReaderCount = configuration.maximumReaderCount
        checkpointWithFullFlush(&grdbConfiguration)
        let pool = try opening(path) { try DatabasePool(path: path, configuration: grdbConfiguration) }
        return try LocalDatabase(
            validatedWriter: pool, schema: Schema(tables: []), path: path, configuration: configuration,
            applyingSchema: false)
    }

    /// Has every connection of a database file opened here flush with `F_FULLFSYNC` when it checkpoints
    /// (`PRAGMA checkpoint_fullfsync`; nothing on systems other than Apple's, whose `fsync` reaches stable
    /// storage). In WAL mode with `synchronous = NORMAL` (GRDB's default) a commit is not flushed; the
    /// database stays consistent because a checkpoint flushes the WAL before it copies pages into the
    /// database file. On Apple platforms a plain `fsync` does not keep that order on the drive, and a power
    /// loss in a checkpoint could leave pages of the database file newer than its WAL. Checkpoints are rare
    /// (every 1,000 pages of WAL), so this costs little. An adopted GRDB writer keeps its own settings.
    private static func checkpointWithFullFlush(_ configuration: inout GRDB.Configuration) {
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA checkpoint_fullfsync = ON") }
    }

    /// Throws ``LocalDatabaseError/Code-swift.struct/invalidPath`` unless a file (not a folder) is at `path`.
    private static func requireFile(_ path: String) throws {
        var isDirectory: ObjCBool = false
        guard !path.isEmpty, FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory),
            !isDirectory.boolValue
        else {
            throw LocalDatabaseError(
                code: .invalidPath, message: "no database file at \(String(reflecting: path))", path: path)
        }
    }

    /// Opens a GRDB connection to the file at `path`, its error made a ``LocalDatabaseError`` naming the path.
    private static func opening<Writer>(_ path: String, _ open: () throws -> Writer) throws -> Writer {
        do {
            return try open()
        } catch {
            var wrapped = LocalDatabaseError.wrapping(error) as? LocalDatabaseError
            wrapped?.path = path
            throw wrapped ?? error
        }
    }

    private init(
        validatedWriter: any DatabaseWriter, schema: Schema, path: String?, configuration: Configuration,
        applyingSchema: Bool = true
    ) throws {
        self.writer = validatedWriter
        self.schema = schema
        self.path = path
        self.otherProcessesCheckInterval = configuration.otherProcessesCheckInterval
        self.clock = configuration.clock
        let logger = configuration.logger
        if applyingSchema {
            try LocalDatabaseError.converting {
                try validatedWriter.write { db in try SchemaApplier(db: db, logger: logger).apply(schema) }
            }
        }
        if let pool = validatedWriter as? DatabasePool {
            var checkerConfiguration = GRDB.Configuration()
            checkerConfiguration.readonly = true
            checkerConfiguration.label = "AttachmentSync.LocalDatabase.sqlChecker"
            checkerConfiguration.busyMode = .timeout(configuration.busyTimeout)
            sqlChecker = try LocalDatabaseError.converting {
                try DatabaseQueue(path: pool.path, configuration: checkerConfiguration)
            }
        } else {
            sqlChecker = nil
        }
    }
}
