import AttachmentSync
import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

/// The streaming garbage collection against a generated remote of thousands of files and real database
/// files, interrupted where it can be.
@Suite("Remote garbage collection at bucket scale", .cleansUp)
struct RemoteGarbageCollectorTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let grace = Duration.seconds(86_400)
    static let hash = String(repeating: "5e", count: 32)

    /// What file `index` of a test remote is: every 7th another tool's, every 5th written within the
    /// grace period, the rest old files of the library's.
    static func file(_ index: Int) -> GeneratedRemoteStorage.File {
        GeneratedRemoteStorage.File(
            size: Int64(index % 97 + 1),
            lastModified: now.addingTimeInterval(index % 5 == 0 ? -60 : -2 * 86_400),
            sha256: index % 7 == 0 ? nil : hash)
    }

    /// A database file whose attachments table has a record for each of `filenames`.
    static func database(in folder: TemporaryDirectory, _ name: String, filenames: [String]) async throws
        -> LocalDatabase
    {
        let db = try LocalDatabase(path: folder.path(name), schema: Schema(tables: [createAttachmentTable()]))
        TestCleanup.add { try? await db.close() }
        try await add(filenames, to: db)
        return db
    }

    static func add(_ filenames: [String], to db: LocalDatabase) async throws {
        try await db.writeTransaction { tx in
            for filename in filenames {
                try tx.execute(
                    sql: "INSERT INTO attachments (id, filename, state, timestamp) VALUES (?, ?, 3, 0)",
                    arguments: [filename, filename])
            }
        }
    }

    /// The names of the files of `kind`, page after page.
    static func names(
        _ kind: RemoteGarbageCollector<GeneratedRemoteStorage>.FileKind,
        of collector: RemoteGarbageCollector<GeneratedRemoteStorage>
    ) async throws -> [String] {
        var names: [String] = []
        for _ in 0..<10_000 {
            let page = try await collector.files(kind, after: names.last, limit: 333)
            names += page.map(\.file.storedName)
            if page.isEmpty { break }
        }
        return names
    }

    @Test(
        "5,000 files in 50 pages against two databases: each file is judged as the rules say, and apply deletes exactly the candidates"
    )
    func judgesEveryFile() async throws {
        let folder = try TemporaryDirectory()
        let remote = GeneratedRemoteStorage(count: 5_000, pageSize: 100, file: Self.file)
        // Every third file has no record; the others are split between the two databases.
        let referenced = (0..<5_000).filter { $0 % 3 != 0 }
        let first = try await Self.database(
            in: folder, "a.sqlite", filenames: referenced.filter { $0 % 2 == 0 }.map(GeneratedRemoteStorage.name))
        let second = try await Self.database(
            in: folder, "b.sqlite", filenames: referenced.filter { $0 % 2 == 1 }.map(GeneratedRemoteStorage.name))
        let collector = try RemoteGarbageCollector(
            remote: remote, databases: [first, second], grace: Self.grace, now: Self.now)
        let reports = LockedValue<[RemoteGarbageCollector<GeneratedRemoteStorage>.Progress]>([])
        let found = try await collector.plan { progress in reports.withLock { $0.append(progress) } }

        let unreferenced = (0..<5_000).filter { $0 % 3 == 0 }
        let foreign = unreferenced.filter { $0 % 7 == 0 }
        let recent = unreferenced.filter { $0 % 7 != 0 && $0 % 5 == 0 }
        let candidates = unreferenced.filter { $0 % 7 != 0 && $0 % 5 != 0 }
        #expect(found.listedFiles == 5_000)
        #expect(found.referencedFiles == referenced.count)
        #expect(found.isListed && !found.isApplied)
        #expect(try await Self.names(.candidate, of: collector) == candidates.map(GeneratedRemoteStorage.name))
        #expect(try await Self.names(.recent, of: collector) == recent.map(GeneratedRemoteStorage.name))
        #expect(try await Self.names(.foreign, of: collector) == foreign.map(GeneratedRemoteStorage.name))
        #expect(found.candidateBytes == candidates.reduce(0) { $0 + Self.file($1).size })
        let listing = reports.withLock { $0.filter { $0.phase == .listing } }
        #expect(listing.map(\.listedFiles) == Array(stride(from: 100, through: 5_000, by: 100)))
        #expect(remote.deleteCalls == 0)

        let applied = try await collector.apply()
        #expect(applied.isApplied)
        #expect(applied.deletedFiles == candidates.count)
        #expect(remote.deletedNames == candidates.map(GeneratedRemoteStorage.name))
        #expect(try await collector.files(.candidate, limit: 5_000).allSatisfy { $0.deleted == true })
        try collector.finish()
    }

    @Test("a listing that fails part-way resumes after the last recorded page, and ends as an uninterrupted run does")
    func listingResumes() async throws {
        let folder = try TemporaryDirectory()
        let remote = GeneratedRemoteStorage(count: 5_000, pageSize: 100, file: Self.file)
        let db = try await Self.database(
            in: folder, "app.sqlite", filenames: (0..<5_000).filter { $0 % 3 != 0 }.map(GeneratedRemoteStorage.name))
        let stateFile = folder.url.appendingPathComponent("gc-state.sqlite")
        // The first call checks that the location exists; the 22nd (asking for page 21) fails.
        remote.failListing(afterPages: 21)
        let interrupted = try RemoteGarbageCollector(
            remote: remote, databases: [db], grace: Self.grace, now: Self.now, stateFile: stateFile)
        await #expect(throws: InjectedFailure("listing failed")) { try await interrupted.plan() }
        let partial = try await interrupted.summary()
        #expect(!partial.isListed)
        #expect(partial.listedFiles == 2_000)
        try interrupted.finish()
        #expect(FileManager.default.fileExists(atPath: stateFile.path))

        // Resumed a day later: ages are still measured from the first run.
        let resumed = try RemoteGarbageCollector(
            remote: remote, databases: [db], grace: Self.grace, now: Self.now.addingTimeInterval(86_400),
            stateFile: stateFile)
        #expect(resumed.now == Self.now)
        let found = try await resumed.plan()
        // Each run checks the location first: 1 + 20 pages + the failed call, then 1 + the 30 pages after
        // the last recorded one. No page was listed twice.
        #expect(remote.listCalls == 53)
        let fresh = try RemoteGarbageCollector(
            remote: GeneratedRemoteStorage(count: 5_000, pageSize: 100, file: Self.file), databases: [db],
            grace: Self.grace, now: Self.now)
        #expect(try await fresh.plan() == found)
        for kind in RemoteGarbageCollector<GeneratedRemoteStorage>.FileKind.allCases {
            #expect(try await Self.names(kind, of: resumed) == Self.names(kind, of: fresh))
        }
        try resumed.finish()
        try fresh.finish()
    }

    @Test("deletes that fail part-way are recorded as far as they went; the rest are deleted on resume")
    func applyResumes() async throws {
        let folder = try TemporaryDirectory()
        let remote = GeneratedRemoteStorage(count: 3_000, pageSize: 250, file: Self.file)
        let db = try await Self.database(
            in: folder, "app.sqlite", filenames: (0..<3_000).filter { $0 % 2 == 0 }.map(GeneratedRemoteStorage.name))
        let stateFile = folder.url.appendingPathComponent("gc-state.sqlite")
        let collector = try RemoteGarbageCollector(
            remote: remote, databases: [db], grace: Self.grace, now: Self.now, stateFile: stateFile)
        let candidates = try await collector.plan().candidates
        remote.failDelete(afterDeletes: 300)
        await #expect(throws: InjectedFailure("delete failed")) { try await collector.apply() }
        let partial = try await collector.summary()
        // What is recorded as deleted is exactly what the remote deleted: the deletes in flight finished.
        #expect(partial.deletedFiles == remote.deletedNames.count)
        #expect(partial.deletedFiles >= 300 && partial.deletedFiles < candidates)
        #expect(!partial.isApplied)
        try collector.finish()

        let resumed = try RemoteGarbageCollector(
            remote: remote, databases: [db], grace: Self.grace, now: Self.now, stateFile: stateFile)
        let done = try await resumed.apply()
        #expect(done.isApplied && done.deletedFiles == candidates && done.keptAtApply == 0)
        let expected = (0..<3_000).filter { $0 % 2 == 1 && $0 % 7 != 0 && $0 % 5 != 0 }
        #expect(remote.deletedNames == expected.map(GeneratedRemoteStorage.name))
        // Each file was deleted once: the failed call, and no second delete of a recorded one.
        #expect(remote.deleteCalls == candidates + 1)
        try resumed.finish()
    }

    @Test("a record added after the listing, before apply, keeps its file; so does one added before a resume")
    func recordsAddedLaterProtect() async throws {
        let folder = try TemporaryDirectory()
        let filenames = (0..<1_000).filter { $0 >= 10 }.map(GeneratedRemoteStorage.name)
        // Files 0 to 9 are unreferenced: 1, 2, 3, 4, 6, 8 and 9 are candidates.
        let remote = GeneratedRemoteStorage(count: 1_000, pageSize: 100, file: Self.file)
        let db = try await Self.database(in: folder, "app.sqlite", filenames: filenames)
        let collector = try RemoteGarbageCollector(remote: remote, databases: [db], grace: Self.grace, now: Self.now)
        #expect(try await collector.plan().candidates == 7)
        try await Self.add([GeneratedRemoteStorage.name(1)], to: db)
        let applied = try await collector.apply()
        #expect(remote.deletedNames == [2, 3, 4, 6, 8, 9].map(GeneratedRemoteStorage.name))
        #expect(applied.candidates == 6 && applied.deletedFiles == 6 && applied.referencedFiles == 991)
        try collector.finish()

        let second = GeneratedRemoteStorage(count: 1_000, pageSize: 100, file: Self.file)
        let otherDB = try await Self.database(in: folder, "other.sqlite", filenames: filenames)
        let stateFile = folder.url.appendingPathComponent("gc-state.sqlite")
        let planned = try RemoteGarbageCollector(
            remote: second, databases: [otherDB], grace: Self.grace, now: Self.now, stateFile: stateFile)
        #expect(try await planned.plan().candidates == 7)
        try planned.finish()
        try await Self.add([GeneratedRemoteStorage.name(9)], to: otherDB)
        let resumed = try RemoteGarbageCollector(
            remote: second, databases: [otherDB], grace: Self.grace, now: Self.now, stateFile: stateFile)
        let done = try await resumed.apply()
        #expect(second.deletedNames == [1, 2, 3, 4, 6, 8].map(GeneratedRemoteStorage.name))
        #expect(done.candidates == 6 && done.deletedFiles == 6 && done.referencedFiles == 991)
        try resumed.finish()
    }

    @Test("a state file is refused for other settings, naming them; a temporary one is removed by finish")
    func stateFileSettings() async throws {
        let folder = try TemporaryDirectory()
        let remote = GeneratedRemoteStorage(count: 10, file: Self.file)
        let db = try await Self.database(in: folder, "app.sqlite", filenames: [])
        let other = try await Self.database(in: folder, "other.sqlite", filenames: [])
        let stateFile = folder.url.appendingPathComponent("gc-state.sqlite")
        try RemoteGarbageCollector(remote: remote, databases: [db], grace: Self.grace, stateFile: stateFile).finish()
        for (grace, databases, remoteName, key) in [
            (Duration.seconds(3_600), [db], nil as String?, "graceSeconds"),
            (Self.grace, [db, other], nil, "databases"),
            (Self.grace, [db], "s3://elsewhere/", "remote"),
        ] {
            #expect {
                if let remoteName {
                    _ = try RemoteGarbageCollector(
                        remote: remote, databases: databases, grace: grace, stateFile: stateFile, remoteName: remoteName
                    )
                } else {
                    _ = try RemoteGarbageCollector(
                        remote: remote, databases: databases, grace: grace, stateFile: stateFile)
                }
            } throws: { error in
                let error = error as? AttachmentError
                return error?.code == .invalidConfiguration && error?.message.contains(key) == true
                    && error?.message.contains(stateFile.path) == true
            }
        }
        // The app's database (with a table named like the state's) or any other file given by mistake is
        // refused before anything is written to it.
        try await db.writeTransaction { tx in
            try tx.execute(sql: "CREATE TABLE files (kind INTEGER, name TEXT, size INTEGER)")
        }
        try await db.close()
        let notState = folder.path("notes.txt")
        try Data("my notes".utf8).write(to: URL(fileURLWithPath: notState))
        for path in [folder.path("app.sqlite"), notState] {
            let before = try Data(contentsOf: URL(fileURLWithPath: path))
            #expect {
                _ = try RemoteGarbageCollector(
                    remote: remote, databases: [other], grace: Self.grace, stateFile: URL(fileURLWithPath: path))
            } throws: { error in
                (error as? AttachmentError)?.code == .invalidConfiguration
                    && (error as? AttachmentError)?.message.contains("is not a state file") == true
            }
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before, "\(path) unchanged")
            // Reading an SQLite file in WAL mode may create its empty `-wal` companion, as any reader does; no
            // page is written to it.
            #expect((try? Data(contentsOf: URL(fileURLWithPath: path + "-wal")))?.isEmpty ?? true)
        }
        let temporary = try RemoteGarbageCollector(remote: remote, databases: [other])
        try await temporary.plan()
        let before = try FileManager.default.contentsOfDirectory(atPath: NSTemporaryDirectory())
            .filter { $0.hasPrefix("attachment-sync-gc-") }
        try temporary.finish()
        let after = try FileManager.default.contentsOfDirectory(atPath: NSTemporaryDirectory())
            .filter { $0.hasPrefix("attachment-sync-gc-") }
        #expect(before.count > after.count)
    }

    /// Records 0..<2,500 synced with the generated sizes (2,400 and up have no remote file); every 10th is
    /// archived (not checked); record 5 claims a size its file does not have, record 1,234 another hash.
    static func verificationDatabase(in folder: TemporaryDirectory) async throws -> LocalDatabase {
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: Schema(tables: [createAttachmentTable()]))
        TestCleanup.add { try? await db.close() }
        try await db.writeTransaction { tx in
            for index in 0..<2_500 {
                let name = GeneratedRemoteStorage.name(index)
                let size = index == 5 ? 1 : Self.file(index).size
                try tx.execute(
                    sql: """
                        INSERT INTO attachments (id, filename, state, timestamp, size, has_synced, content_hash)
                        VALUES (?, ?, ?, 0, ?, 1, ?)
                        """,
                    arguments: [
                        name, name, index % 10 == 0 ? AttachmentState.archived.rawValue : 3, size,
                        index == 1_234 ? String(repeating: "e", count: 64) : nil,
                    ])
            }
        }
        return db
    }

    @Test("verify reads a table of 2,500 records a page at a time: every due record checked once, each problem found")
    func verificationPagesThroughTheTable() async throws {
        let folder = try TemporaryDirectory()
        let remote = GeneratedRemoteStorage(count: 2_400, pageSize: 100, file: Self.file)
        let db = try await Self.verificationDatabase(in: folder)
        let reports = LockedValue<[Int]>([])
        let totals = LockedValue<Set<Int>>([])
        let check = try await RemoteVerification.verify(db: db, remote: remote) { checked, total in
            reports.withLock { $0.append(checked) }
            totals.withLock { _ = $0.insert(total) }
        }
        #expect(check.checkedFiles == 2_250)
        #expect(reports.withLock { $0 } == Array(1...2_250))
        #expect(totals.withLock { $0 } == [2_250])
        let missing = (2_400..<2_500).filter { $0 % 10 != 0 }.map(GeneratedRemoteStorage.name)
        #expect(check.findings.filter { $0.problem == .missing }.map(\.attachmentId) == missing)
        #expect(
            check.findings.filter { $0.problem != .missing }.map(\.problem) == [
                .wrongSize(expected: 1, actual: Self.file(5).size),
                .wrongHash(expected: String(repeating: "e", count: 64), actual: Self.hash),
            ])
    }

    @Test(
        "verify with a state file: an interrupted check goes on after its last finished page and finds what a whole one does; a finished one answers from the file"
    )
    func verificationResumesFromItsStateFile() async throws {
        let folder = try TemporaryDirectory()
        let remote = GeneratedRemoteStorage(count: 2_400, pageSize: 100, file: Self.file)
        let db = try await Self.verificationDatabase(in: folder)
        let whole = try await RemoteVerification.verify(db: db, remote: remote)
        #expect(whole.findings.count == 92, "90 missing, a size, a hash: \(whole.findings.count)")
        let state = URL(fileURLWithPath: folder.path("verify-state.sqlite"))

        // Pages of 1,000 records (900 due); the second page is cut after 600 of its files were described.
        remote.failDescribe(afterDescribes: 1_500)
        await #expect(throws: InjectedFailure.self) {
            _ = try await RemoteVerification.verify(db: db, remote: remote, stateFile: state, remoteName: "generated")
        }
        let before = remote.describeCalls
        let resumed = try await RemoteVerification.verify(
            db: db, remote: remote, stateFile: state, remoteName: "generated")
        // Records 1,000..<2,400 that are due (the ones past 2,400 have no file to describe).
        #expect(remote.describeCalls - before == 1_260, "only the records after the first page are checked again")
        #expect(resumed.checkedFiles == whole.checkedFiles)
        #expect(resumed.findings == whole.findings)

        let finished = remote.describeCalls
        let again = try await RemoteVerification.verify(
            db: db, remote: remote, stateFile: state, remoteName: "generated")
        #expect(remote.describeCalls == finished, "a finished check asks the remote nothing")
        #expect(again.findings == whole.findings && again.checkedFiles == whole.checkedFiles)

        // The same file with other settings, or a file that is not a state file, is refused untouched.
        for (file, encrypted, remoteName, says) in [
            (state, true, "generated", "encrypted"), (state, false, "other", "remote"),
            (URL(fileURLWithPath: folder.path("app.sqlite")), false, "generated", "is not a state file"),
        ] {
            do {
                _ = try await RemoteVerification.verify(
                    db: db, remote: remote, encrypted: encrypted, stateFile: file, remoteName: remoteName)
                Issue.record("a state file of other settings was taken: \(says)")
            } catch let error as AttachmentError {
                #expect(error.code == .invalidConfiguration)
                #expect(error.message.contains(says), "\(error.message)")
            }
        }
    }

    @Test(
        "property: over random remotes, records and interruptions, only old unreferenced files of the library's are deleted, and all of them"
    )
    func randomHistories() async throws {
        let seed = SplitMix64.seed(from: "ATTACHMENT_SYNC_GC_SEED")
        print("RemoteGarbageCollectorTests.randomHistories seed \(seed) (ATTACHMENT_SYNC_GC_SEED=\(seed) replays)")
        var random = SplitMix64(seed: seed)
        for history in 0..<25 {
            let folder = try TemporaryDirectory()
            let count = Int(random.next(below: 1_500)) + 1
            let pageSize = Int(random.next(below: 300)) + 1
            let remote = GeneratedRemoteStorage(count: count, pageSize: pageSize, file: Self.file)
            var referenced = Set((0..<count).filter { _ in random.next(below: 3) != 0 })
            let db = try await Self.database(
                in: folder, "app.sqlite", filenames: referenced.sorted().map(GeneratedRemoteStorage.name))
            let stateFile = folder.url.appendingPathComponent("gc-state.sqlite")
            var done = false
            for attempt in 0..<12 where !done {
                // Records arrive between runs for files not deleted yet: those must survive.
                let deleted = Set(remote.deletedNames.compactMap(GeneratedRemoteStorage.index(of:)))
                let arriving = (0..<count).filter { !deleted.contains($0) && random.next(below: 50) == 0 }
                try await Self.add(
                    arriving.filter { !referenced.contains($0) }.map(GeneratedRemoteStorage.name), to: db)
                referenced.formUnion(arriving)
                if attempt < 8 {
                    switch random.next(below: 3) {
                    case 0: remote.failListing(afterPages: Int(random.next(below: UInt64(count / pageSize + 2))))
                    case 1: remote.failDelete(afterDeletes: Int(random.next(below: 200)))
                    default: break
                    }
                }
                let collector = try RemoteGarbageCollector(
                    remote: remote, databases: [db], grace: Self.grace, now: Self.now, stateFile: stateFile)
                do {
                    done = try await collector.apply().isApplied
                } catch is InjectedFailure {}
                try collector.finish()
            }
            #expect(done, "history \(history) of seed \(seed) did not finish")
            let deleted = remote.deletedNames.compactMap(GeneratedRemoteStorage.index(of:))
            let expected = (0..<count).filter {
                !referenced.contains($0) && Self.file($0).sha256 != nil && $0 % 5 != 0
            }
            #expect(deleted == expected, "history \(history) of seed \(seed)")
        }
    }
}
