import Foundation

/// The remote files that no database refers to any more, found safely, and deleted only when asked: for
/// tools (the `attachment-sync gc` command) and for a server that owns a bucket.
///
/// ``plan(remote:databases:table:grace:now:)`` lists the remote, then reads every record of every database
/// given; a listed file is *unreferenced* when no record of any of them (in any state, archived ones
/// included) has its filename. An unreferenced file is *foreign* when this library did not write it: it
/// carries no SHA-256 stored by the library's upload (``ListableRemoteStorage/storedSHA256(of:)``: the
/// folder and HTTP remotes' `.attachment-sync-sha256-<name>` beside it, S3's `x-amz-meta-sha256` on it).
/// A remote folder or bucket prefix is often shared with other things (a backup, a `readme.txt`, Finder's
/// `.DS_Store`), and a name alone proves nothing, so foreign files are listed and never deleted, whatever
/// their age. An unreferenced file of the library's is only a *candidate* for deletion when it was last
/// written longer ago than the grace period: a file another device uploaded a moment ago, whose row has
/// not reached these databases yet, is younger than that and kept. A file whose age the remote does not
/// say is kept too. ``apply(to:onEach:)`` deletes the candidates (each after checking its stored hash again), and
/// the adapter's own leftovers (the temporary file of an interrupted upload, a stored hash whose file is
/// gone) older than the grace period.
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
    /// Unreferenced files older than the grace period: what ``apply(to:onEach:)`` deletes, by stored name.
    public var candidates: [RemoteFile]
    /// Unreferenced files kept because they are younger than the grace period (or of unknown age).
    public var recent: [RemoteFile]
    /// Unreferenced files this library did not write (no SHA-256 of its uploads stored with them), by
    /// stored name: kept, whatever their age.
    public var foreign: [RemoteFile] = []
    /// The adapter's own files no file needs any more (see ``ListableRemoteStorage/listLeftovers()``),
    /// older than the grace period: ``apply(to:onEach:)`` deletes them too. Younger ones (an upload in progress,
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
    /// Changes nothing. The databases are read before the remote is listed and again after, so a record
    /// added meanwhile still protects its file. Every unreferenced file is asked for its stored SHA-256 (a
    /// `HEAD` each on S3 and HTTP, 8 at a time; a file read on a folder). It holds every unreferenced file
    /// in memory: for a bucket of millions of objects, use ``RemoteGarbageCollector``, which keeps them in a
    /// state file and resumes after an interruption.
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
    ///   for a bad table name; ``AttachmentError/Code-swift.struct/remoteNotFound`` when the remote's location
    ///   does not exist (``ListableRemoteStorage/locationExists()``: a mistyped bucket, prefix or folder);
    ///   database errors and what the remote throws. Nothing is planned on an error.
    public static func plan<Remote: ListableRemoteStorage>(
        remote: Remote, databases: [LocalDatabase], table: String = "attachments",
        grace: Duration = .seconds(7 * 86_400), now: Date = Date()
    ) async throws -> RemoteGarbageCollection {
        let collector = try RemoteGarbageCollector(
            remote: remote, databases: databases, table: table, grace: grace, now: now)
        defer { try? collector.finish() }
        let summary = try await collector.plan()
        /// Every file of `kind`.
        func all(_ kind: FileKind) async throws -> [RemoteFile] {
            var files: [RemoteFile] = []
            try await collector.forEachFile(kind) { files.append($0.file) }
            return files
        }
        return RemoteGarbageCollection(
            listedFiles: summary.listedFiles, referencedFiles: summary.referencedFiles,
            candidates: try await all(.candidate), recent: try await all(.recent), foreign: try await all(.foreign),
            leftovers: try await all(.leftover), grace: grace, now: now)
    }

    /// Whether each of `files` carries the SHA-256 the library's uploads store, asking up to 8 at a time.
    static func libraryWritten(_ files: [RemoteFile], on remote: some ListableRemoteStorage) async throws -> [Bool] {
        var results = [Bool](repeating: false, count: files.count)
        try await withThrowingTaskGroup(of: (Int, Bool).self) { group in
            var next = 0
            func start() {
                guard next < files.count else { return }
                let (index, file) = (next, files[next])
                next += 1
                group.addTask { (index, try await remote.storedSHA256(of: file) != nil) }
            }
            for _ in 0..<8 { start() }
            while let (index, written) = try await group.next() {
                results[index] = written
                start()
            }
        }
        return results
    }

    /// Deletes the candidates, then the leftovers, one after another, and returns how many files were
    /// deleted. A candidate is asked for its stored SHA-256 again just before its delete, and kept when it
    /// has none any more (another tool put its own file under the name since the plan).
    ///
    /// - Parameters:
    ///   - remote: The remote the plan listed.
    ///   - onEach: Called after each file with whether it was deleted (`false`: a candidate no longer
    ///     carries the library's stored hash, and was kept). The default does nothing.
    /// - Throws: The first error the remote throws; the files before it are deleted, the rest are not.
    @discardableResult
    public func apply(
        to remote: some ListableRemoteStorage, onEach: @Sendable (RemoteFile, _ deleted: Bool) -> Void = { _, _ in }
    ) async throws -> Int {
        var deleted = 0
        for file in candidates {
            guard try await remote.storedSHA256(of: file) != nil else {
                onEach(file, false)
                continue
            }
            try await remote.deleteListedFile(file)
            deleted += 1
            onEach(file, true)
        }
        for file in leftovers {
            try await remote.deleteLeftover(file)
            deleted += 1
            onEach(file, true)
        }
        return deleted
    }
}
