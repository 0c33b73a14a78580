import Foundation
import GRDB

/// What a ``RemoteGarbageCollector`` has found and done so far, kept in an SQLite file so that memory does
/// not grow with the remote's size and an interrupted collection continues where it stopped.
///
/// Three tables: `refs` (the stored names of every record's file read so far; read again before any
/// delete, and only ever added to, so a name once read keeps protecting its file), `files` (every listed
/// file no reference names, with its kind and, once applied, what happened to it) and `meta` (the
/// collection's settings, its phase, the listing's continuation and counts). The file is in WAL mode with
/// `synchronous = NORMAL`: a power loss may lose the last page's commit (the page is listed again), never
/// leave the file inconsistent.
struct CollectionState: Sendable {
    /// How a file of `files` is kept or collected.
    enum Kind: Int, Sendable {
        case candidate = 0
        case recent = 1
        case foreign = 2
        case leftover = 3
    }

    /// What was done to a candidate or leftover (`NULL` while pending).
    enum Outcome: Int, Sendable {
        case deleted = 1
        case kept = 2
    }

    /// The phases a collection goes through, kept in `meta`.
    enum Phase: String, Sendable {
        case listing, listed, applied
    }

    /// The format this code writes; a file of another is refused.
    static let version = 1

    let file: StateFile
    var queue: DatabaseQueue { file.queue }
    var url: URL { file.url }

    /// What `meta` holds under `format` in every state file: a file without it is not one.
    static let format = "attachment-sync gc state"

    /// Opens (creating it) the state file at `url`. A file already there must be a state file: anything
    /// else (an app's database given by mistake, say) is refused before anything is written to it.
    init(url: URL) throws {
        file = try StateFile(
            url: url, format: Self.format, what: "a remote garbage collection",
            label: "AttachmentSync.RemoteGarbageCollector",
            schema: """
                CREATE TABLE IF NOT EXISTS refs (name TEXT PRIMARY KEY) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS files (
                    kind INTEGER NOT NULL, name TEXT NOT NULL, filename TEXT, size INTEGER NOT NULL,
                    modified REAL, outcome INTEGER, PRIMARY KEY (kind, name)) WITHOUT ROWID
                """)
    }

    private func converting<T>(_ body: () throws -> T) throws -> T { try file.converting(body) }

    private func reading<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await file.reading(body)
    }

    private func writing<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await file.writing(body)
    }

    func meta(_ key: String) throws -> DatabaseValue { try file.meta(key) }

    /// Records `settings` and `now` in a new state file, or checks them against those of one that holds a
    /// collection; returns the time ages are measured from (the first run's).
    func prepare(settings: [String: DatabaseValue], now: Date) throws -> Date {
        if try meta("phase").isNull {
            var values = settings
            values["now"] = now.timeIntervalSince1970.databaseValue
            values["phase"] = Phase.listing.rawValue.databaseValue
            try setMetaNow(values)
            return now
        }
        try file.check(settings, holding: "a collection")
        let started = try meta("now")
        if let seconds = Double.fromDatabaseValue(started) { return Date(timeIntervalSince1970: seconds) }
        return now
    }

    /// Sets the keys of `values` in `meta`, in one transaction (synchronously: for set-up).
    func setMetaNow(_ values: [String: DatabaseValue]) throws { try file.setMetaNow(values) }

    /// Sets the keys of `values` in `meta`, in one transaction.
    func setMeta(_ values: [String: DatabaseValue]) async throws { try await file.setMeta(values) }

    static func setMeta(_ values: [String: DatabaseValue], in db: Database) throws {
        try StateFile.setMeta(values, in: db)
    }

    /// Adds `names` to the references (synchronously: called while a source database is read).
    func addReferences(_ names: [String]) throws {
        guard !names.isEmpty else { return }
        try converting {
            try queue.write { db in
                let statement = try db.cachedStatement(sql: "INSERT OR IGNORE INTO refs (name) VALUES (?)")
                for name in names { try statement.execute(arguments: [name]) }
            }
        }
    }

    /// The indexes of `names` that some reference names.
    func referenced(_ names: [String]) async throws -> Set<Int> {
        try await reading { db in
            let statement = try db.cachedStatement(sql: "SELECT 1 FROM refs WHERE name = ?")
            var found = Set<Int>()
            for (index, name) in names.enumerated() where try Bool.fetchOne(statement, arguments: [name]) != nil {
                found.insert(index)
            }
            return found
        }
    }

    /// Records one listed page: its unreferenced files by kind, the counts, and the continuation of the
    /// next page (`nil` after the last), in one transaction.
    func recordPage(
        _ files: [(RemoteFile, Kind)], listed: Int, referenced: Int, continuation: String?, finished: Bool
    ) async throws {
        try await writing { db in
            let insert = try db.cachedStatement(
                sql: "INSERT OR REPLACE INTO files (kind, name, filename, size, modified) VALUES (?, ?, ?, ?, ?)")
            for (file, kind) in files {
                try insert.execute(arguments: [
                    kind.rawValue, file.storedName, file.filename, file.size,
                    file.lastModified?.timeIntervalSince1970,
                ])
            }
            try Self.setMeta(
                [
                    "listed": listed.databaseValue, "referenced": referenced.databaseValue,
                    "continuation": continuation.databaseValue, "listingDone": finished.databaseValue,
                ], in: db)
        }
    }

    /// Takes out of the unreferenced files every pending one a reference now names, adding them to the
    /// referenced count, and returns how many.
    func dropReferenced() async throws -> Int {
        try await writing { db in
            try db.execute(
                sql: """
                    DELETE FROM files WHERE kind IN (0, 1, 2) AND outcome IS NULL
                        AND name IN (SELECT name FROM refs)
                    """)
            let dropped = db.changesCount
            try db.execute(
                sql: "UPDATE meta SET value = value + ? WHERE key = 'referenced'", arguments: [dropped])
            return dropped
        }
    }

    /// Up to `limit` files of `kind` after `name` in the order of their names' bytes; with `pending`, only
    /// those not yet applied.
    func files(_ kind: Kind, after name: String?, limit: Int, pending: Bool = false) async throws -> [(
        file: RemoteFile, outcome: Outcome?
    )] {
        try await reading { db in
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT name, filename, size, modified, outcome FROM files
                    WHERE kind = ? AND name > ? \(pending ? "AND outcome IS NULL" : "") ORDER BY name LIMIT ?
                    """, arguments: [kind.rawValue, name ?? "", limit])
            return rows.map { row in
                let modified: Double? = row["modified"]
                let outcome: Int? = row["outcome"]
                return (
                    RemoteFile(
                        storedName: row["name"], filename: row["filename"], size: row["size"],
                        lastModified: modified.map(Date.init(timeIntervalSince1970:))),
                    outcome.flatMap(Outcome.init(rawValue:))
                )
            }
        }
    }

    /// Records what was done to files of `kind`, in one transaction.
    func recordOutcomes(_ outcomes: [(name: String, outcome: Outcome)], kind: Kind) async throws {
        guard !outcomes.isEmpty else { return }
        try await writing { db in
            let update = try db.cachedStatement(sql: "UPDATE files SET outcome = ? WHERE kind = ? AND name = ?")
            for (name, outcome) in outcomes {
                try update.execute(arguments: [outcome.rawValue, kind.rawValue, name])
            }
        }
    }

    /// Replaces the leftovers not yet applied with `leftovers`.
    func replacePendingLeftovers(_ leftovers: [RemoteFile]) async throws {
        try await writing { db in
            try db.execute(sql: "DELETE FROM files WHERE kind = 3 AND outcome IS NULL")
            let insert = try db.cachedStatement(
                sql: "INSERT OR IGNORE INTO files (kind, name, filename, size, modified) VALUES (3, ?, ?, ?, ?)")
            for file in leftovers {
                try insert.execute(arguments: [
                    file.storedName, file.filename, file.size, file.lastModified?.timeIntervalSince1970,
                ])
            }
        }
    }

    /// Per kind: how many files, their bytes (saturated), how many were deleted and how many kept at apply.
    func tally() async throws -> [Kind: Tally] {
        try await reading { db in
            var tally: [Kind: Tally] = [:]
            let rows = try Row.fetchCursor(
                db,
                sql: """
                    SELECT kind, count(*) AS n, total(max(size, 0)) AS bytes,
                        sum(outcome = 1) AS deleted, sum(outcome = 2) AS kept
                    FROM files GROUP BY kind
                    """)
            while let row = try rows.next() {
                guard let kind = Kind(rawValue: row["kind"]) else { continue }
                // total() sums as a double, which cannot overflow; saturated here.
                let bytes: Double = row["bytes"] ?? 0
                tally[kind] = Tally(
                    count: row["n"], bytes: bytes >= 9.2e18 ? Int64.max : Int64(bytes),
                    deleted: row["deleted"] ?? 0, kept: row["kept"] ?? 0)
            }
            return tally
        }
    }

    /// How many files of a kind there are, their bytes, and how many were deleted or kept at apply.
    struct Tally: Sendable {
        var count = 0, bytes: Int64 = 0, deleted = 0, kept = 0
    }

    /// Removes the state file and its WAL and shared-memory files.
    static func remove(at url: URL) { StateFile.remove(at: url) }
}
