import Foundation
import GRDB

extension RemoteGarbageCollector {
    /// The most pages a listing reads, so a remote that keeps returning a continuation cannot loop forever.
    static var maximumPages: Int { 10_000_000 }

    /// How many references are added to the state file at once.
    static var referenceBatch: Int { 5_000 }

    /// How many candidates are taken from the state file at once to be deleted.
    static var deleteBatch: Int { 256 }

    /// The grace period in seconds.
    var graceSeconds: Double {
        Double(grace.components.seconds) + Double(grace.components.attoseconds) / 1e18
    }

    /// Whether `file` was last written longer ago than the grace period (`false` when its age is unknown).
    func isOld(_ file: RemoteFile) -> Bool {
        file.lastModified.map { now.timeIntervalSince($0) > graceSeconds } ?? false
    }

    /// The counts recorded so far, for a progress report.
    func progress(_ phase: Progress.Phase) -> Progress {
        Progress(
            phase: phase, listedFiles: (try? Int.fromDatabaseValue(state.meta("listed"))) ?? 0,
            unreferencedFiles: 0, deletedFiles: 0)
    }

    /// Adds the stored name of every record's file, in every database, to the state file's references. A
    /// filename the remote cannot store has no file to keep. Only the names are read, in one read
    /// transaction per database and a few thousand at a time, so memory does not grow with the table.
    func readReferences(_ report: (@Sendable (Progress) -> Void)?) async throws {
        let store = AttachmentStore(table: table)
        let (remote, state) = (self.remote, self.state)
        let base = progress(.readingReferences)
        let read = LockedValue(0)
        for db in databases {
            do {
                try await db.readTransaction { tx in
                    try store.checkTable(in: tx)
                    var batch: [String] = []
                    batch.reserveCapacity(Self.referenceBatch)
                    var records = 0
                    func flush() throws {
                        try state.addReferences(batch)
                        let total = read.withLock { count in
                            count += records
                            return count
                        }
                        (records, batch) = (0, [])
                        batch.reserveCapacity(Self.referenceBatch)
                        var now = base
                        now.recordsRead = total
                        report?(now)
                    }
                    try store.forEachFilename(in: tx) { filename in
                        records += 1
                        if let name = try? remote.storedName(forFilename: filename) { batch.append(name) }
                        if records == Self.referenceBatch { try flush() }
                    }
                    try flush()
                }
            } catch var error as LocalDatabaseError {
                if error.path == nil { error.path = db.path }
                throw error
            }
        }
    }

    /// Lists the remote from the recorded continuation to the end, a page at a time (the next page is
    /// asked for while one is looked up), recording each page's unreferenced files and the counts.
    func list(_ report: (@Sendable (Progress) -> Void)?) async throws {
        guard try state.meta("listingDone") != true.databaseValue else { return }
        var listed = Int.fromDatabaseValue(try state.meta("listed")) ?? 0
        var referenced = Int.fromDatabaseValue(try state.meta("referenced")) ?? 0
        var continuation = String.fromDatabaseValue(try state.meta("continuation"))
        let remote = self.remote
        @Sendable func fetch(_ continuation: String?) async throws -> RemoteFileListing {
            guard let continuation else { return RemoteFileListing(files: [], next: nil) }
            return try await remote.listFiles(after: continuation)
        }
        var page = try await remote.listFiles(after: continuation)
        for _ in 0..<Self.maximumPages {
            if let next = page.next, next == continuation {
                throw AttachmentError(
                    code: .remoteFailure,
                    message: "\(type(of: remote)) listed the same page again (continuation "
                        + "\(String(reflecting: next))); stopped after \(listed) files")
            }
            let nextContinuation = page.next
            async let following = fetch(nextContinuation)
            let found = try await state.referenced(page.files.map(\.storedName))
            let unreferenced = page.files.indices.filter { !found.contains($0) }.map { page.files[$0] }
            let written = try await RemoteGarbageCollection.libraryWritten(unreferenced, on: remote)
            let kinds = zip(unreferenced, written).map { file, isLibrarys -> (RemoteFile, CollectionState.Kind) in
                (file, !isLibrarys ? .foreign : isOld(file) ? .candidate : .recent)
            }
            listed += page.files.count
            referenced += found.count
            try await state.recordPage(
                kinds, listed: listed, referenced: referenced, continuation: page.next, finished: page.next == nil)
            report?(Progress(phase: .listing, listedFiles: listed, unreferencedFiles: listed - referenced))
            guard let next = page.next else { return }
            continuation = next
            page = try await following
        }
        throw AttachmentError(
            code: .remoteFailure,
            message: "\(type(of: remote)) has more than \(Self.maximumPages) pages of files; stopped after \(listed)")
    }

    /// Deletes the candidates, then the leftovers, not yet dealt with: a batch at a time, a few at once,
    /// recording each outcome. On an error, the deletes in flight finish and are recorded, then it is thrown.
    func delete(_ report: (@Sendable (Progress) -> Void)?) async throws {
        var progress = progress(.deleting)
        progress.deletedFiles = try await summary().deletedFiles
        let remote = self.remote
        for kind in [CollectionState.Kind.candidate, .leftover] {
            var after: String?
            for _ in 0..<Self.maximumPages {
                let batch = try await state.files(kind, after: after, limit: Self.deleteBatch, pending: true)
                guard let last = batch.last else { break }
                after = last.file.storedName
                let files = batch.map(\.file)
                let results = await withTaskGroup(of: Deletion.self, returning: [Deletion].self) { group in
                    var (results, next, stopped) = ([Deletion](), 0, false)
                    while next < files.count, next < Self.concurrency {
                        let file = files[next]
                        group.addTask { await Deletion(file, kind, on: remote) }
                        next += 1
                    }
                    while let result = await group.next() {
                        results.append(result)
                        stopped = stopped || result.error != nil
                        if !stopped, next < files.count {
                            let file = files[next]
                            group.addTask { await Deletion(file, kind, on: remote) }
                            next += 1
                        }
                    }
                    return results
                }
                let outcomes = results.compactMap { result in result.outcome.map { (name: result.name, outcome: $0) } }
                let failure = results.first { $0.error != nil }?.error
                try await state.recordOutcomes(outcomes, kind: kind)
                progress.deletedFiles += outcomes.filter { $0.outcome == .deleted }.count
                report?(progress)
                if let failure { throw failure }
            }
        }
    }

    /// One delete of ``delete(_:)``: the file's name, and what was done or the error.
    struct Deletion: Sendable {
        let name: String
        let outcome: CollectionState.Outcome?
        let error: (any Error)?

        /// Deletes one candidate (when it still carries the library's stored SHA-256) or leftover.
        init(_ file: RemoteFile, _ kind: CollectionState.Kind, on remote: Remote) async {
            name = file.storedName
            do {
                if kind == .leftover {
                    try await remote.deleteLeftover(file)
                    (outcome, error) = (.deleted, nil)
                } else if try await remote.storedSHA256(of: file) == nil {
                    (outcome, error) = (.kept, nil)
                } else {
                    try await remote.deleteListedFile(file)
                    (outcome, error) = (.deleted, nil)
                }
            } catch {
                (outcome, self.error) = (nil, error)
            }
        }
    }
}
