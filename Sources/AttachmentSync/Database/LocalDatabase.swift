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
    /// Options for opening a database.
    public struct Configuration: Sendable {
        /// How long a write waits for a lock held by another process (another app extension, say) before it
        /// fails. The default is 5 seconds.
        public var busyTimeout: TimeInterval = 5
        /// The most read connections a file database opens at once. The default is 5.
        public var maximumReaderCount: Int = 5
        /// How often watches look for commits made by other processes: an app's share extension or widget
        /// writing to a database in an App Group container, a command-line tool. SQLite tells this
        /// process nothing of them, so while at least one watch is active the database asks SQLite (`PRAGMA
        /// data_version`, a counter only other connections' commits move) and, when it moved, has every
        /// watch read its query again (each yields only if its result changed). `nil` never looks. The
        /// default is 1 second.
        public var otherProcessesCheckInterval: Duration? = .seconds(1)
        /// The clock of ``otherProcessesCheckInterval`` (tests drive a manual one). The default is a
        /// `ContinuousClock`.
        public var clock: any Clock<Duration> = ContinuousClock()
        /// Where schema changes are logged (at `debug` level). The default discards everything.
        public var logger: Logger = Logger(label: "AttachmentSync.LocalDatabase") { _ in SwiftLogNoOpLogHandler() }

        /// Creates a configuration with the defaults.
        public init() {}
    }

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

    // MARK: - Statements

    /// Executes one or more SQL statements in their own transaction.
    ///
    /// - Returns: The number of rows the last `INSERT`, `UPDATE` or `DELETE` changed; `0` for other
    ///   statements.
    /// - Throws: ``LocalDatabaseError`` with code ``LocalDatabaseError/Code-swift.struct/sqlError`` when
    ///   SQLite rejects the statement, ``LocalDatabaseError/Code-swift.struct/closed`` after `close()`.
    @discardableResult
    public func execute(sql: String, parameters: SqlParameters = []) async throws -> Int {
        try await writeTransaction { tx in try tx.execute(sql: sql, parameters: parameters) }
    }

    /// Runs a query and maps every row with `mapper`.
    ///
    /// ```swift
    /// let names = try await db.getAll(sql: "SELECT name FROM lists ORDER BY name") { cursor in
    ///     try cursor.getString(name: "name")
    /// }
    /// ```
    public func getAll<T: Sendable>(
        sql: String,
        parameters: SqlParameters = [],
        mapper: @escaping @Sendable (SqlCursor) throws -> T
    ) async throws -> [T] {
        try await readTransaction { tx in try tx.getAll(sql: sql, parameters: parameters, mapper: mapper) }
    }

    /// Runs a query and maps its first row.
    ///
    /// - Throws: ``LocalDatabaseError`` with code ``LocalDatabaseError/Code-swift.struct/noRows`` when the
    ///   query returns no row.
    public func get<T: Sendable>(
        sql: String,
        parameters: SqlParameters = [],
        mapper: @escaping @Sendable (SqlCursor) throws -> T
    ) async throws -> T {
        try await readTransaction { tx in try tx.get(sql: sql, parameters: parameters, mapper: mapper) }
    }

    /// Runs a query and maps its first row, or returns `nil` when it has none.
    public func getOptional<T: Sendable>(
        sql: String,
        parameters: SqlParameters = [],
        mapper: @escaping @Sendable (SqlCursor) throws -> T
    ) async throws -> T? {
        try await readTransaction { tx in try tx.getOptional(sql: sql, parameters: parameters, mapper: mapper) }
    }

    // MARK: - Transactions

    /// Runs `body` in a write transaction: it commits when `body` returns and rolls back every change when
    /// `body` throws (the error is rethrown as it was thrown).
    ///
    /// Writes are serialized; reads and watches go on meanwhile and see the changes once committed.
    @discardableResult
    public func writeTransaction<Result: Sendable>(
        _ body: @escaping @Sendable (SqlTransaction) throws -> Result
    ) async throws -> Result {
        try ensureOpen()
        do {
            return try await writer.write { db in try body(SqlTransaction(db)) }
        } catch {
            throw LocalDatabaseError.wrapping(error)
        }
    }

    /// Runs `body` in a write transaction whose commit is on stable storage when this returns, whatever the
    /// connection's `synchronous` setting (GRDB's WAL default, `NORMAL`, may lose the last commits on a power
    /// loss). The queue uses it before it destroys something the commit makes redundant: the app's own file
    /// after `saveFile(fileURL:…moveFile: true)`, the local copy after `deleteFile`.
    ///
    /// `synchronous = FULL` has SQLite flush the WAL at the commit. On Apple platforms that flush is an
    /// `fsync`, which leaves the commit in the drive's volatile cache, unordered with later writes, unless
    /// `PRAGMA fullfsync` is on: SQLite then uses `F_FULLFSYNC` (the pragma does nothing on other systems,
    /// whose `fsync` reaches stable storage). Both are set for this commit only and restored afterwards.
    /// Apple's own build of SQLite (the one GRDB links there) is reported to carry `fullfsync` out with
    /// `F_BARRIERFSYNC`, which orders the commit before every later write to the drive but does not wait for
    /// it; so the drive holding the database is drained once more after the commit
    /// (``SystemFileOperations/drainDrive(holding:)``, `F_FULLFSYNC`; nothing on Linux).
    @discardableResult
    func durableWriteTransaction<Result: Sendable>(
        _ body: @escaping @Sendable (SqlTransaction) throws -> Result
    ) async throws -> Result {
        try ensureOpen()
        let result: Result
        do {
            result = try await writer.writeWithoutTransaction { db in
                // 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA: FULL flushes the WAL at each commit.
                let mode = try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? 2
                let fullFlush = try Bool.fetchOne(db, sql: "PRAGMA fullfsync") ?? false
                if mode < 2 { try db.execute(sql: "PRAGMA synchronous = FULL") }
                if !fullFlush { try db.execute(sql: "PRAGMA fullfsync = ON") }
                defer {
                    if mode < 2 { try? db.execute(sql: "PRAGMA synchronous = \(mode)") }
                    if !fullFlush { try? db.execute(sql: "PRAGMA fullfsync = OFF") }
                }
                var result: Result?
                try db.inTransaction(.immediate) {
                    result = try body(SqlTransaction(db))
                    return .commit
                }
                guard let result else { throw CancellationError() }
                return result
            }
        } catch {
            throw LocalDatabaseError.wrapping(error)
        }
        if let file = databaseFile { SystemFileOperations().drainDrive(holding: file) }
        return result
    }

    /// The database file, for a file database (opened here or adopted); `nil` in memory.
    private var databaseFile: String? {
        let file = path ?? (writer as? DatabasePool)?.path ?? (writer as? DatabaseQueue)?.path
        guard let file, !file.isEmpty, file != ":memory:" else { return nil }
        return file
    }

    /// Runs `body` in a read-only transaction that sees one consistent snapshot of the database.
    ///
    /// Writing through the transaction fails with ``LocalDatabaseError/Code-swift.struct/sqlError``.
    @discardableResult
    public func readTransaction<Result: Sendable>(
        _ body: @escaping @Sendable (SqlTransaction) throws -> Result
    ) async throws -> Result {
        try ensureOpen()
        do {
            return try await writer.read { db in try body(SqlTransaction(db)) }
        } catch {
            throw LocalDatabaseError.wrapping(error)
        }
    }

    // MARK: - Closing

    /// Ends every watch, waits for reads and writes in progress, and closes the database's connections.
    /// Later calls throw ``LocalDatabaseError/Code-swift.struct/closed``. Closing twice is harmless.
    ///
    /// The waiting happens off Swift's cooperative thread pool, so it is safe while other tasks still use
    /// the database.
    public func close() async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            blockingQueue.async {
                do {
                    try self.close()
                    continuation.resume()
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    /// Ends every watch and closes the database's connections, blocking the calling thread until reads
    /// and writes in progress have finished. Later calls throw ``LocalDatabaseError/Code-swift.struct/closed``.
    /// Closing twice is harmless.
    ///
    /// From async code, call the `async` overload (`try await db.close()`): blocking one of the
    /// cooperative pool's threads while other tasks' reads wait to resume on them can stall the process.
    public func close() throws {
        let watches = state.withLock { state -> [RegisteredWatch] in
            guard !state.isClosed else { return [] }
            state.isClosed = true
            defer { state.watches = [:] }
            return Array(state.watches.values)
        }
        for watch in watches {
            watch.cancellable.cancel()
            watch.finish()
        }
        try LocalDatabaseError.converting {
            try sqlChecker?.close()
            try writer.close()
        }
    }

    /// Whether `close()` has been called.
    public var isClosed: Bool { state.withLock { $0.isClosed } }

    func ensureOpen() throws {
        if isClosed {
            throw LocalDatabaseError(code: .closed, message: "the database is closed", path: path)
        }
    }
}
