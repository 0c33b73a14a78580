import AttachmentSync
import AttachmentSyncTesting
import Foundation
import TestSupport

/// P17 (issue 29): `gc` at bucket scale. A generated remote of 1,000,000 files (20,000 with `--quick`),
/// 1,000 to a page, against a database whose attachments table refers to all but every 100th: the 1 %
/// unreferenced are old files of the library's, so they are deleted. Each side runs in a child process of
/// its own, so its peak RSS is its own:
/// - `streaming`: ``RemoteGarbageCollector`` (`plan` then `apply`), with its state in a temporary file;
/// - `in-memory`: what a plain gc does, and what this library did before: every listed file in an array,
///   every reference in a `Set`, then the same checks and deletes.
/// Both must delete exactly the unreferenced files. The target is the streaming side's peak RSS; the time
/// of each is printed, as a ratio to the in-memory one.
enum BucketGCScenario {
    static let peakLimit: Int64 = 64 << 20
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    static func run(_ size: RunSize) async throws -> ScenarioReport {
        let count = size == .full ? 1_000_000 : 20_000
        let folder = try WorkFolder(label: "p17")
        defer { folder.remove() }
        let database = folder.path("app.sqlite")
        let clock = ContinuousClock()
        let start = clock.now
        let db = try LocalDatabase(path: database, schema: Schema(tables: [createAttachmentTable()]))
        try await db.writeTransaction { tx in
            for index in 0..<count where !isUnreferenced(index) {
                let name = GeneratedRemoteStorage.name(index)
                try tx.execute(
                    sql: "INSERT INTO attachments (id, filename, state, timestamp) VALUES (?, ?, 3, 0)",
                    arguments: [name, name])
            }
        }
        try await db.close()
        let setUp = clock.now - start
        var results: [String: (elapsed: Duration, peak: Int64)] = [:]
        for mode in ["streaming", "in-memory"] {
            let fields = try await ChildProcess.runThisExecutable(
                [BucketGCChild.command, mode, database, String(count)], resultPrefix: BucketGCChild.resultPrefix,
                what: "P17 \(mode)")
            let values = ChildProcess.namedValues(fields)
            guard let peak = values["peak"].flatMap({ Int64($0) }),
                let seconds = values["seconds"].flatMap({ Double($0) })
            else { throw BenchmarkFailure("the P17 \(mode) child printed \(fields.joined(separator: " "))") }
            results[mode] = (.seconds(seconds), peak)
        }
        let streaming = results["streaming"]!
        let inMemory = results["in-memory"]!
        let ratio = streaming.elapsed / inMemory.elapsed
        let met = streaming.peak <= peakLimit
        return ScenarioReport(
            title: "gc over \(formatCount(count)) listed files, \(formatCount(count / 100)) of them deleted",
            figures: "streaming \(formatDuration(streaming.elapsed)), peak RSS \(formatMiB(streaming.peak)); "
                + "in memory \(formatDuration(inMemory.elapsed)), peak RSS \(formatMiB(inMemory.peak))",
            result: "peak RSS \(formatMiB(streaming.peak)), time \(formatRatio(ratio)) the in-memory gc's",
            target: "target peak RSS ≤ \(formatMiB(peakLimit))", verdict: met ? .pass : .miss,
            details: [
                "set-up (a database of \(formatCount(count - count / 100)) records) \(formatDuration(setUp))",
                "per listed file: streaming \(String(format: "%.2f", streaming.elapsed.seconds / Double(count) * 1e6)) µs, "
                    + "in memory \(String(format: "%.2f", inMemory.elapsed.seconds / Double(count) * 1e6)) µs",
                "both sides deleted exactly the \(formatCount(count / 100)) unreferenced files",
            ],
            missNote: met ? "" : "the streaming gc's peak RSS is over the limit")
    }

    /// Every 100th file has no record.
    static func isUnreferenced(_ index: Int) -> Bool { index % 100 == 7 }

    static func file(_ index: Int) -> GeneratedRemoteStorage.File {
        GeneratedRemoteStorage.File(
            size: Int64(4_096 + index % 1_000), lastModified: now.addingTimeInterval(-30 * 86_400),
            sha256: String(repeating: "3c", count: 32))
    }
}

/// The P17 child (`attachment-sync-bench __p17-child streaming|in-memory <database> <count>`): collects the
/// generated remote against the database and prints `P17-RESULT peak=<bytes> seconds=<s>`.
enum BucketGCChild {
    static let command = "__p17-child"
    static let resultPrefix = "P17-RESULT"

    static func main(_ arguments: [String]) async -> Int32 {
        guard arguments.count == 3, let count = Int(arguments[2]) else {
            printError("usage: attachment-sync-bench \(command) streaming|in-memory <database> <count>")
            return 2
        }
        let remote = GeneratedRemoteStorage(count: count, pageSize: 1_000, file: BucketGCScenario.file)
        do {
            let db = try LocalDatabase.readOnly(path: arguments[1])
            let clock = ContinuousClock()
            let start = clock.now
            switch arguments[0] {
            case "streaming":
                let collector = try RemoteGarbageCollector(
                    remote: remote, databases: [db], grace: .seconds(86_400), now: BucketGCScenario.now)
                try await collector.apply()
                try collector.finish()
            case "in-memory": try await inMemory(remote, db)
            default:
                printError("unknown mode \(arguments[0])")
                return 2
            }
            let elapsed = clock.now - start
            let expected = (0..<count).filter(BucketGCScenario.isUnreferenced).map(GeneratedRemoteStorage.name)
            guard remote.deletedNames == expected else {
                printError(
                    "P17 \(arguments[0]) deleted \(remote.deletedNames.count) files, not the \(expected.count) unreferenced"
                )
                return 1
            }
            try await db.close()
            guard let peak = Memory.peakResidentBytes() else {
                printError("cannot read the peak resident set size")
                return 1
            }
            print("\(resultPrefix) peak=\(peak) seconds=\(String(format: "%.3f", elapsed.seconds))")
            return 0
        } catch {
            printError("P17 \(arguments[0]) failed: \(error)")
            return 1
        }
    }

    /// The plain way: the whole listing and every reference in memory, then HEAD and delete each old
    /// unreferenced file of the library's, 8 at a time.
    static func inMemory(_ remote: GeneratedRemoteStorage, _ db: LocalDatabase) async throws {
        let references = Set(
            try await db.readTransaction { tx in
                try tx.getAll(sql: "SELECT filename FROM attachments") { try $0.getString(name: "filename") }
            })
        let listed = try await remote.allFiles()
        let unreferenced = listed.filter { !references.contains($0.storedName) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            var next = unreferenced.makeIterator()
            func start() {
                guard let file = next.next() else { return }
                group.addTask {
                    let old = file.lastModified.map { BucketGCScenario.now.timeIntervalSince($0) > 86_400 } ?? false
                    // Asked twice, as a safe gc does: when it is found, and again just before its delete.
                    if old, try await remote.storedSHA256(of: file) != nil,
                        try await remote.storedSHA256(of: file) != nil
                    {
                        try await remote.deleteListedFile(file)
                    }
                }
            }
            for _ in 0..<8 { start() }
            while try await group.next() != nil { start() }
        }
    }
}
