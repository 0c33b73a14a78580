import Foundation

/// The remote files that no database refers to any more, found safely, and deleted only when asked: for
/// tools (the `attachment-sync gc` command) and for a server that owns a bucket.
///
/// ``plan(remote:databases:table:grace:now:)`` lists the remote, then reads every record of every database
/// given; a listed file is *unreferenced* when no record of any of them (in any state, archived ones
/// included) has its filename. An unreferenced file is only a *candidate* for deletion when it was last
/// written longer ago than the grace period: a file another device uploaded a moment ago, whose row has
/// not reached these databases yet, is younger than that and kept. A file whose age the remote does not
/// say is kept too. ``apply(to:)`` deletes the candidates, and the adapter's own leftovers (the temporary
/// file of an interrupted upload, a stored hash whose file is gone) older than the grace period.
///
/// The caveat, honestly: each device's attachments table holds the attachments that device knows about.
/// Give the databases of every device that may still need a file (or one that sees every row), and a
/// grace period longer than the longest a device stays offline with rows it has not synced; a file
/// deleted too early is lost for every device that had not downloaded it.
///
/// ```swift
/// let plan = try await RemoteGarbageCollection.plan(
///     remote: storage, databases: [try LocalDatabase.readOnly(path: "app.sqlite")], grace: .seconds(7 * 86_400))
/// print(plan.candidates.count, plan.candidateBytes)
/// try await plan.apply(to: storage)
/// ```
public struct RemoteGarbageCollection: Sendable {
    /// How many files the remote lists.
    public var listedFiles: Int
    /// How many of them some record refers to.
    public var referencedFiles: Int
    /// Unreferenced files older than the grace period: what ``apply(to:)`` deletes, by stored name.
    public var candidates: [RemoteFile]
    /// Unreferenced files kept because they are younger than the grace period (or of unknown age).
    public var recent: [RemoteFile]
    /// The adapter's own files no file needs any more (see ``ListableRemoteStorage/listLeftovers()``),
    /// older than the grace period: ``apply(to:)`` deletes them too. Younger ones (an upload in progress,
    /// perhaps) are not planned.
    public var leftovers: [RemoteFile] = []
    /// The grace period the plan used.
    public var grace: Duration
    /// The time the plan measured ages from.
    public var now: Date

    /// The bytes the candidates take, saturated at `Int64.max`.
    public var candidateBytes: Int64 { candidates.reduce(0) { $0.addingClamped(max(0, $1.size)) } }
    /// The bytes the leftovers take, saturated at `Int64.max`.
    public var leftoverBytes: Int64 { leftovers.reduce(0) { $0.addingClamped(max(0, $1.size)) } }

    /// Finds the remote files that no record of `databases` refers to and that are older than `grace`.
    ///
    /// Changes nothing. The remote is listed before the databases are read, so a record added meanwhile
    /// still protects its file.
    ///
    /// - Parameters:
    ///   - remote: The remote storage the apps' queues use.
    ///   - databases: The databases whose records keep files (``LocalDatabase/readOnly(path:configuration:)``
    ///     for a tool). At least one.
    ///   - table: The attachments table's name in each of them. The default is `attachments`.
    ///   - grace: How old an unreferenced file must be to be a candidate. The default is 7 days.
    ///   - now: The time ages are measured from. The default is the current date.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/invalidConfiguration``
    ///   for no database, a negative grace period or a missing table; ``AttachmentError/Code-swift.struct/invalidName``
    ///   for a bad table name; database errors and what the remote throws. Nothing is planned on an error.
    public static func plan(
        remote: some ListableRemoteStorage, databases: [LocalDatabase], table: String = "attachments",
        grace: Duration = .seconds(7 * 86_400), now: Date = Date()
    ) async throws -> RemoteGarbageCollection {
        guard !databases.isEmpty else {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "no database given: every remote file would look unreferenced, so nothing is collected")
        }
        guard grace >= .zero else {
            throw AttachmentError(
                code: .invalidConfiguration, message: "the grace period \(grace) is negative")
        }
        try AttachmentStore.validateTableName(table)
        let listed = try await remote.allFiles()
        var referenced = Set<[UInt8]>()
        for db in databases {
            for filename in try await referencedFilenames(in: db, table: table) {
                // A filename the remote cannot store has no file to keep.
                if let name = try? remote.storedName(forFilename: filename) {
                    referenced.insert(Array(name.utf8))
                }
            }
        }
        let graceSeconds = Double(grace.components.seconds) + Double(grace.components.attoseconds) / 1e18
        var plan = RemoteGarbageCollection(
            listedFiles: listed.count, referencedFiles: 0, candidates: [], recent: [], grace: grace, now: now)
        func isOld(_ file: RemoteFile) -> Bool {
            file.lastModified.map { now.timeIntervalSince($0) > graceSeconds } ?? false
        }
        for file in listed {
            if referenced.contains(Array(file.storedName.utf8)) {
                plan.referencedFiles += 1
            } else if isOld(file) {
                plan.candidates.append(file)
            } else {
                plan.recent.append(file)
            }
        }
        plan.leftovers = try await remote.listLeftovers().filter(isOld)
        return plan
    }

    /// The filename of every record of `table` in `db`, whatever its state (the id when it has none, as the
    /// queue reads it). Only the names are read: a record whose other columns hold values the queue would
    /// refuse (a size that is text, say) still keeps its file, and cannot stop the collection.
    static func referencedFilenames(in db: LocalDatabase, table: String) async throws -> [String] {
        let store = AttachmentStore(table: table)
        return try await db.readTransaction { tx in
            try store.checkTable(in: tx)
            return try tx.getAll(sql: "SELECT id, filename FROM \(store.table)") { cursor in
                try cursor.getStringOptional(name: "filename") ?? cursor.getString(name: "id")
            }
        }
    }

    /// Deletes the candidates, then the leftovers, one after another, and returns how many files were
    /// deleted.
    ///
    /// - Parameter remote: The remote the plan listed.
    /// - Throws: The first error the remote throws; the files before it are deleted, the rest are not.
    @discardableResult
    public func apply(to remote: some ListableRemoteStorage) async throws -> Int {
        var deleted = 0
        for file in candidates {
            try await remote.deleteListedFile(file)
            deleted += 1
        }
        for file in leftovers {
            try await remote.deleteLeftover(file)
            deleted += 1
        }
        return deleted
    }
}
