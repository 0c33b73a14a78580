import Foundation
import GRDB

/// An SQLite file in which a run over a whole remote keeps what it found and how far it got, so that memory
/// does not grow with the remote's size and an interrupted run continues where it stopped: the state of a
/// ``RemoteGarbageCollector`` and of a ``RemoteVerification``.
///
/// Every state file has a `meta` table (`key`, `value`) whose `format` entry says what kind of run it
/// belongs to; a file without the right one is refused before anything is written to it (an app's database
/// given by mistake, say). The file is in WAL mode with `synchronous = NORMAL`: a power loss may lose the
/// last commit (that step is done again), never leave the file inconsistent.
struct StateFile: Sendable {
    let queue: DatabaseQueue
    let url: URL
    let format: String
    /// The kind of run, for messages ("a remote garbage collection").
    let what: String

    /// Opens (creating it) the state file at `url` with the tables of `schema` besides `meta`.
    init(url: URL, format: String, what: String, label: String, schema: String) throws {
        self.url = url
        self.format = format
        self.what = what
        try Self.require(at: url, format: format, what: what)
        var configuration = Configuration()
        configuration.label = label
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL")
        }
        let queue = try Self.converting(url) { try DatabaseQueue(path: url.path, configuration: configuration) }
        self.queue = queue
        try Self.converting(url) {
            try queue.write { db in
                try db.execute(sql: "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID")
                try db.execute(sql: schema)
                try db.execute(sql: "INSERT OR IGNORE INTO meta (key, value) VALUES ('format', ?)", arguments: [format])
            }
        }
    }

    /// Throws unless nothing is at `url`, or an empty file, or a state file of `format`. The file is opened
    /// read-only (SQLite may create the empty `-wal` and `-shm` companions of a WAL database, as for any
    /// reader).
    static func require(at url: URL, format: String, what: String) throws {
        let path = url.path
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path) else { return }
        if (attributes[.size] as? NSNumber)?.int64Value == 0, attributes[.type] as? FileAttributeType == .typeRegular {
            return
        }
        var configuration = Configuration()
        configuration.readonly = true
        let found: String?
        do {
            let reader = try DatabaseQueue(path: path, configuration: configuration)
            defer { try? reader.close() }
            found = try reader.read { db in
                guard try db.tableExists("meta") else { return nil }
                return try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'format'")
            }
        } catch {
            found = nil
        }
        guard found == format else {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "\(String(reflecting: path)) is not a state file of \(what); nothing was written to it: "
                    + "give a new path, or one an earlier run made",
                path: path)
        }
    }

    /// `error` naming the state file, when it is a ``LocalDatabaseError`` that names no file: a database error
    /// of the run is then told apart from one of the databases it reads.
    private func naming(_ error: any Error) -> any Error {
        guard var error = error as? LocalDatabaseError, error.path == nil else { return error }
        error.path = url.path
        return error
    }

    /// Runs `body`, its GRDB errors made ``LocalDatabaseError``s naming the state file at `url`.
    static func converting<T>(_ url: URL, _ body: () throws -> T) throws -> T {
        do {
            return try LocalDatabaseError.converting(body)
        } catch var error as LocalDatabaseError {
            if error.path == nil { error.path = url.path }
            throw error
        }
    }

    /// Runs `body`, its GRDB errors made ``LocalDatabaseError``s naming the state file.
    func converting<T>(_ body: () throws -> T) throws -> T {
        try Self.converting(url, body)
    }

    /// Runs `body` in a read of the file on GRDB's queue, its errors made ``LocalDatabaseError``s.
    func reading<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        do { return try await queue.read(body) } catch { throw naming(LocalDatabaseError.wrapping(error)) }
    }

    /// Runs `body` in a write transaction of the file on GRDB's queue, its errors made ``LocalDatabaseError``s.
    func writing<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        do { return try await queue.write(body) } catch { throw naming(LocalDatabaseError.wrapping(error)) }
    }

    /// The value of `key` in `meta` (read synchronously: for set-up).
    func meta(_ key: String) throws -> DatabaseValue {
        try converting {
            try queue.read { db in
                try DatabaseValue.fetchOne(db, sql: "SELECT value FROM meta WHERE key = ?", arguments: [key])
            } ?? .null
        }
    }

    /// Throws `invalidConfiguration` naming the first setting whose stored value is not the one in
    /// `settings` (the file holds `run`, made with other settings).
    func check(_ settings: [String: DatabaseValue], holding run: String) throws {
        for key in settings.keys.sorted() {
            let expected = settings[key] ?? .null
            let stored = try meta(key)
            if stored != expected {
                throw AttachmentError(
                    code: .invalidConfiguration,
                    message: "the state file \(url.path) holds \(run) with \(key) \(stored.description), "
                        + "not \(expected.description): give the same settings, or another state file")
            }
        }
    }

    /// Sets the keys of `values` in `meta`, in one transaction (synchronously: for set-up).
    func setMetaNow(_ values: [String: DatabaseValue]) throws {
        try converting { try queue.write { db in try Self.setMeta(values, in: db) } }
    }

    /// Sets the keys of `values` in `meta`, in one transaction.
    func setMeta(_ values: [String: DatabaseValue]) async throws {
        try await writing { db in try Self.setMeta(values, in: db) }
    }

    static func setMeta(_ values: [String: DatabaseValue], in db: Database) throws {
        for (key, value) in values {
            try db.execute(sql: "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", arguments: [key, value])
        }
    }

    /// Removes the state file at `url` and its WAL and shared-memory files.
    static func remove(at url: URL) {
        for suffix in ["", "-wal", "-shm"] {
            try? FileManager.default.removeItem(atPath: url.path + suffix)
        }
    }
}
