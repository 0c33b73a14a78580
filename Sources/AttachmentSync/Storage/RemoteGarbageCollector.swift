import Foundation
import GRDB

/// A garbage collection of remote storage of any size: the remote is listed a page at a time against the
/// databases' references, what it finds is kept in a state file instead of memory, and an interrupted run
/// continues where it stopped.
///
/// It decides as ``RemoteGarbageCollection`` describes (unreferenced, foreign, candidate, recent,
/// leftover), in three steps:
/// 1. Every database's records are read, and the names their files are stored under are added to the
///    state file's index.
/// 2. The remote is listed page after page; each listed name is looked up in that index, and only the
///    unreferenced files are kept (on disk) and asked for their stored SHA-256. Memory stays the same
///    whatever the number of objects; the state file grows with the unreferenced files only.
/// 3. The databases are read again once the listing is over, and before every ``apply(progress:)``: a
///    file a record refers to by then is taken out of the unreferenced ones. References are only ever
///    added, so a name once read protects its file for the whole collection.
///
/// With a `stateFile`, an interruption (a crash, a lost connection, Ctrl-C) loses at most the page being
/// listed or the deletes in flight: a new collector on the same file with the same settings goes on
/// listing after the last recorded page, or deleting the candidates not yet deleted (after reading the
/// databases again). Ages stay measured from the first run's `now`, which only keeps more files.
///
/// ```swift
/// let collector = try RemoteGarbageCollector(
///     remote: storage, databases: [try LocalDatabase.readOnly(path: "app.sqlite")],
///     stateFile: URL(fileURLWithPath: "gc-state.sqlite"))
/// let found = try await collector.plan()
/// print(found.candidates, found.candidateBytes)
/// try await collector.apply()
/// try collector.finish()
/// ```
public final class RemoteGarbageCollector<Remote: ListableRemoteStorage>: Sendable {
    /// Where a collection stands (``RemoteGarbageCollection/Progress``).
    public typealias Progress = RemoteGarbageCollection.Progress
    /// What a collection found and did (``RemoteGarbageCollection/Summary``).
    public typealias Summary = RemoteGarbageCollection.Summary
    /// The files of a collection by what it decided (``RemoteGarbageCollection/FileKind``).
    public typealias FileKind = RemoteGarbageCollection.FileKind
    /// A file of a collection (``RemoteGarbageCollection/Entry``).
    public typealias Entry = RemoteGarbageCollection.Entry

    /// The remote being collected.
    public let remote: Remote
    /// The databases whose records keep files.
    public let databases: [LocalDatabase]
    /// The attachments table's name in each database.
    public let table: String
    /// How old an unreferenced file must be to be a candidate.
    public let grace: Duration
    /// The time ages are measured from: the first run's, when a state file is resumed.
    public let now: Date
    let state: CollectionState
    let removesState: Bool

    /// How many candidates are asked for their stored SHA-256 and deleted at once.
    static var concurrency: Int { 8 }

    /// Prepares a collection of `remote` against the records of `databases`, or resumes one.
    ///
    /// - Parameters:
    ///   - remote: The remote storage the apps' queues use.
    ///   - databases: The databases whose records keep files. At least one.
    ///   - table: The attachments table's name in each of them. The default is `attachments`.
    ///   - grace: How old an unreferenced file must be to be a candidate. The default is 7 days.
    ///   - now: The time ages are measured from. The default is the current date; a resumed state file
    ///     keeps its first run's.
    ///   - stateFile: An SQLite file to keep the collection in, created when missing and resumed when it
    ///     holds a collection with the same settings. The default is `nil`: a temporary file, removed by
    ///     ``finish()``.
    ///   - remoteName: What identifies the remote in the state file (a URL, say): a state file made for
    ///     another remote is refused. The default is the adapter's type name.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/invalidConfiguration`` for
    ///   no database, a negative grace period, or a state file made with other settings (the message names
    ///   both); ``AttachmentError/Code-swift.struct/invalidName`` for a bad table name; a
    ///   ``LocalDatabaseError`` when the state file cannot be opened.
    public init(
        remote: Remote, databases: [LocalDatabase], table: String = "attachments",
        grace: Duration = .seconds(7 * 86_400), now: Date = Date(), stateFile: URL? = nil,
        remoteName: String = String(reflecting: Remote.self)
    ) throws {
        guard !databases.isEmpty else {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "no database given: every remote file would look unreferenced, so nothing is collected")
        }
        guard grace >= .zero else {
            throw AttachmentError(code: .invalidConfiguration, message: "the grace period \(grace) is negative")
        }
        try AttachmentStore.validateTableName(table)
        let settings: [String: DatabaseValue] = [
            "version": CollectionState.version.databaseValue, "remote": remoteName.databaseValue,
            "table": table.databaseValue, "graceSeconds": grace.components.seconds.databaseValue,
            "graceAttoseconds": grace.components.attoseconds.databaseValue,
            "databases": databases.map { $0.path ?? "(not a file)" }.sorted().joined(separator: "\n").databaseValue,
        ]
        let (state, start) = try Self.openState(stateFile, settings: settings, now: now)
        self.remote = remote
        self.databases = databases
        self.table = table
        self.grace = grace
        self.now = start
        self.state = state
        removesState = stateFile == nil
    }

    /// Opens the state file (a temporary one when `stateFile` is `nil`), records `settings` and `now` in a
    /// new one, or checks them against those of one that holds a collection; returns it and the time ages
    /// are measured from.
    private static func openState(
        _ stateFile: URL?, settings: [String: DatabaseValue], now: Date
    ) throws -> (CollectionState, Date) {
        let url =
            stateFile
            ?? FileManager.default.temporaryDirectory.appendingPathComponent(
                "attachment-sync-gc-\(UUID().uuidString).sqlite")
        let state = try CollectionState(url: url)
        let prepared = Result { try state.prepare(settings: settings, now: now) }
        if case .failure = prepared {
            try? state.queue.close()
            if stateFile == nil { CollectionState.remove(at: url) }
        }
        return (state, try prepared.get())
    }

    /// Lists the remote against the databases' references (or goes on listing after an interruption) and
    /// returns what was found. Changes nothing on the remote. A collection already listed is not listed
    /// again.
    ///
    /// - Parameter progress: Called after each page listed and each batch of records read. The default
    ///   is `nil`.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/remoteNotFound`` when the
    ///   remote's location does not exist; ``AttachmentError/Code-swift.struct/remoteFailure`` when the
    ///   remote repeats a page or has more than ten million; database errors (naming the database's file)
    ///   and what the remote throws. What was listed before is kept for the next run.
    @discardableResult
    public func plan(progress: (@Sendable (Progress) -> Void)? = nil) async throws -> Summary {
        _ = try await listIfNeeded(progress)
        return try await summary()
    }

    /// Lists unless the listing is complete; returns whether it read the databases after listing.
    private func listIfNeeded(_ progress: (@Sendable (Progress) -> Void)?) async throws -> Bool {
        guard try state.meta("phase") == CollectionState.Phase.listing.rawValue.databaseValue else { return false }
        try await RemoteVerification.requireLocation(of: remote)
        try await readReferences(progress)
        try await list(progress)
        // Read again after the listing: a record added while it ran protects its file too.
        try await readReferences(progress)
        _ = try await state.dropReferenced()
        let leftovers = try await remote.listLeftovers().filter(isOld)
        try await state.replacePendingLeftovers(leftovers)
        try await state.setMeta(["phase": CollectionState.Phase.listed.rawValue.databaseValue])
        return true
    }

    /// Deletes the candidates and leftovers not yet deleted (listing first when ``plan(progress:)`` has not
    /// finished), after reading the databases again, and returns the summary.
    ///
    /// Each candidate is asked for its stored SHA-256 just before its delete and kept when it has none any
    /// more (another tool put its own file under the name). Deletes run a few at a time; each one's outcome
    /// is recorded, so a run that stops part-way resumes with the rest.
    ///
    /// - Parameter progress: Called after each batch of deletes. The default is `nil`.
    /// - Throws: What ``plan(progress:)`` throws, and the first error the remote throws on a delete (the
    ///   deletes that finished are recorded).
    @discardableResult
    public func apply(progress: (@Sendable (Progress) -> Void)? = nil) async throws -> Summary {
        let justRead = try await listIfNeeded(progress)
        if try state.meta("phase") != CollectionState.Phase.applied.rawValue.databaseValue {
            if !justRead {
                try await readReferences(progress)
                _ = try await state.dropReferenced()
            }
            try await delete(progress)
            try await state.setMeta(["phase": CollectionState.Phase.applied.rawValue.databaseValue])
        }
        return try await summary()
    }

    /// Up to `limit` files of `kind` whose stored names come after `name`, in the order of the names'
    /// UTF-8 bytes; page through them by passing the last one's name.
    public func files(_ kind: FileKind, after name: String? = nil, limit: Int = 1_000) async throws -> [Entry] {
        try await state.files(kind.stored, after: name, limit: max(1, limit)).map { file, outcome in
            Entry(file: file, deleted: outcome.map { $0 == .deleted })
        }
    }

    /// Calls `body` with every file of `kind`, in the order of their names' UTF-8 bytes, reading them from
    /// the state file a page at a time.
    public func forEachFile(_ kind: FileKind, _ body: (Entry) throws -> Void) async throws {
        var after: String?
        for _ in 0..<Self.maximumPages {
            let page = try await files(kind, after: after, limit: 1_000)
            guard let last = page.last else { return }
            after = last.file.storedName
            for entry in page { try body(entry) }
        }
    }

    /// What the collection has found and done so far.
    public func summary() async throws -> Summary {
        let tally = try await state.tally()
        var summary = Summary()
        summary.listedFiles = Int.fromDatabaseValue(try state.meta("listed")) ?? 0
        summary.referencedFiles = Int.fromDatabaseValue(try state.meta("referenced")) ?? 0
        summary.candidates = tally[.candidate]?.count ?? 0
        summary.candidateBytes = tally[.candidate]?.bytes ?? 0
        summary.recent = tally[.recent]?.count ?? 0
        summary.foreign = tally[.foreign]?.count ?? 0
        summary.leftovers = tally[.leftover]?.count ?? 0
        summary.leftoverBytes = tally[.leftover]?.bytes ?? 0
        summary.deletedFiles = (tally[.candidate]?.deleted ?? 0) + (tally[.leftover]?.deleted ?? 0)
        summary.keptAtApply = tally[.candidate]?.kept ?? 0
        let phase = try state.meta("phase")
        summary.isApplied = phase == CollectionState.Phase.applied.rawValue.databaseValue
        summary.isListed = summary.isApplied || phase == CollectionState.Phase.listed.rawValue.databaseValue
        return summary
    }

    /// Closes the state file, and removes it when it is the temporary one (a `stateFile` given is kept:
    /// remove it once done with it). The collector cannot be used afterwards.
    public func finish() throws {
        try LocalDatabaseError.converting { try state.queue.close() }
        if removesState { CollectionState.remove(at: state.url) }
    }

    deinit {
        if removesState {
            try? state.queue.close()
            CollectionState.remove(at: state.url)
        }
    }
}

extension RemoteGarbageCollection {
    /// Where a collection stands, reported as it goes.
    public struct Progress: Sendable, Hashable {
        /// What the collection is doing.
        public enum Phase: Sendable, Hashable {
            /// Reading the databases' references.
            case readingReferences
            /// Listing the remote.
            case listing
            /// Deleting candidates and leftovers.
            case deleting
        }

        /// What the collection is doing.
        public var phase: Phase
        /// How many records were read in this reading of the databases.
        public var recordsRead = 0
        /// How many files were listed so far, in this run and earlier ones on the same state file.
        public var listedFiles = 0
        /// How many of them no reference names.
        public var unreferencedFiles = 0
        /// How many files were deleted so far.
        public var deletedFiles = 0
    }

    /// What a collection found and did: counts and bytes, never the files themselves (read them with
    /// ``RemoteGarbageCollector/files(_:after:limit:)``).
    public struct Summary: Sendable, Hashable {
        /// How many files the remote lists.
        public var listedFiles = 0
        /// How many of them some record refers to.
        public var referencedFiles = 0
        /// Unreferenced files of the library's older than the grace period.
        public var candidates = 0
        /// The bytes the candidates take, saturated at `Int64.max`.
        public var candidateBytes: Int64 = 0
        /// Unreferenced files of the library's kept as younger than the grace period (or of unknown age).
        public var recent = 0
        /// Unreferenced files this library did not write: kept.
        public var foreign = 0
        /// The adapter's own files no file needs, older than the grace period.
        public var leftovers = 0
        /// The bytes the leftovers take, saturated at `Int64.max`.
        public var leftoverBytes: Int64 = 0
        /// Candidates and leftovers deleted so far.
        public var deletedFiles = 0
        /// Candidates kept when their turn came, as they no longer carried the library's stored SHA-256.
        public var keptAtApply = 0
        /// Whether the listing is complete (`false` after an interruption: the counts are partial).
        public var isListed = false
        /// Whether every candidate and leftover has been dealt with by ``RemoteGarbageCollector/apply(progress:)``.
        public var isApplied = false
    }

    /// The files of a collection, by what it decided about them.
    public enum FileKind: Sendable, Hashable, CaseIterable {
        /// Unreferenced files of the library's older than the grace period: deleted by ``RemoteGarbageCollector/apply(progress:)``.
        case candidate
        /// Unreferenced files of the library's younger than the grace period (or of unknown age): kept.
        case recent
        /// Unreferenced files the library did not write: kept, whatever their age.
        case foreign
        /// The adapter's own files no file needs, older than the grace period: deleted by ``RemoteGarbageCollector/apply(progress:)``.
        case leftover

        var stored: CollectionState.Kind {
            switch self {
            case .candidate: .candidate
            case .recent: .recent
            case .foreign: .foreign
            case .leftover: .leftover
            }
        }
    }

    /// A file of a collection, and what ``RemoteGarbageCollector/apply(progress:)`` did to it.
    public struct Entry: Sendable, Hashable {
        /// The file as the listing reported it.
        public var file: RemoteFile
        /// `true` when it was deleted, `false` when it was kept at apply (it no longer carried the library's
        /// stored SHA-256), `nil` while not applied (and for kept kinds).
        public var deleted: Bool?
    }
}
