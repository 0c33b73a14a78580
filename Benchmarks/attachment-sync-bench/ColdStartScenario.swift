import AttachmentSync
import AttachmentSyncTesting
import Foundation
import TestSupport

/// P10: a cold start over a large table. 1,000,000 (10,000) synced attachments, each with its file, are set
/// up with SQL (as in P13); then, three times, the app starts again, in a process of its own
/// (``ColdStartChild``, as an app is launched): the database is opened, a queue is made over it, and the time
/// runs until `waitForInit()` returns and a first `saveFile` has returned (the queue is then ready to accept
/// saves and start transfers). Before each start, what the startup check must find and fix is left for it:
/// three synced attachments lose their file (they must be queued for download again), and a leftover
/// temporary file and a file named like a generated attachment that no record claims are put in the folder
/// (both must be removed). The figure is the median start. With the default
/// ``AttachmentQueue/Configuration/startupFileCheck`` a table this large is checked in the background (the
/// queued records before the queue is ready); the time until ``AttachmentQueue/waitForStartupCheck()``
/// returns is shown too, and the fixes are checked after it, with SQL, once the child has exited. The child's
/// peak resident set is printed when the first save returned and once the check is done. For comparison,
/// the floor: one read of every record's id and local file, and one listing of the folder.
enum ColdStartScenario {
    /// The most a start may take at the full size.
    static let targetMilliseconds = 100.0
    /// The bytes of every file.
    static let content = Data("8 bytes!".utf8)
    /// SHA-256 of ``content``, in hex.
    static let contentSHA256 = QueueLengthScenario.contentSHA256
    /// Starts timed.
    static let rounds = 3

    /// What one start measured, as its child reported it.
    struct Start: Sendable {
        /// From opening the database until the first `saveFile` returned.
        var start: Duration
        /// From opening the database until `waitForInit()` returned.
        var initialized: Duration
        /// From opening the database until `waitForStartupCheck()` returned.
        var checked: Duration
        /// The id of the first save.
        var saved: String
        /// The child's peak resident set when the first save had returned, and once the check was done.
        var peakAtSave: Int64
        var peak: Int64
    }

    /// Runs P10.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let count = size == .full ? 1_000_000 : 10_000
        return try await withWorkFolder("p10") { folder in
            let remote = InMemoryRemoteStorage()
            let (_, setup) = try await measure {
                try await withDevice(in: folder, remote: remote) { device in
                    try await populateRecords(
                        device, count: count, state: .synced, prefix: "s", content: content, sha256: contentSHA256)
                    try await device.queue.waitForInit()
                }
            }
            var starts: [Start] = []
            var floors: [Duration] = []
            for round in 0..<rounds {
                let missing = (0..<3).map { String(format: "s%06d", 1 + round * 3 + $0) }
                let attachments = folder.file("attachments")
                for id in missing {
                    try FileManager.default.removeItem(at: attachments.appendingPathComponent(id + ".bin"))
                }
                let leftovers = [
                    ".attachment-sync-tmp-\(UUID().uuidString)", UUID().uuidString.lowercased() + ".jpg",
                ]
                for name in leftovers { try Data("x".utf8).write(to: attachments.appendingPathComponent(name)) }

                floors.append(try await floor(folder, count: count))
                let started = try await ColdStartChild.run(folder)
                try await verify(folder, missing: missing, leftovers: leftovers, saved: started.saved, count: count)
                starts.append(started)
            }
            let start = median(starts.map(\.start))
            let floor = median(floors)
            let peak = starts.map(\.peak).max() ?? 0
            let peakAtSave = starts.map(\.peakAtSave).max() ?? 0
            return ScenarioReport(
                title: "cold start over \(formatCount(count)) attachments, until a first saveFile has returned",
                figures: "\(formatDuration(start)) (median of \(rounds); the floor, one read of the table and one "
                    + "listing of the folder: \(formatDuration(floor))); peak RSS \(formatMiB(peakAtSave)) at the "
                    + "save, \(formatMiB(peak)) after the startup check",
                result: "\(formatRatio(start.seconds / floor.seconds)) the floor",
                target: "target ≤ \(Int(targetMilliseconds)) ms at \(formatSizeLabel(count))",
                verdict: start.milliseconds <= targetMilliseconds ? .pass : .miss,
                details: [
                    "starts: " + starts.map { formatDuration($0.start) }.joined(separator: ", ")
                        + "; of which until waitForInit returned: "
                        + starts.map { formatDuration($0.initialized) }.joined(separator: ", "),
                    "the whole startup check (in the background) done after: "
                        + starts.map { formatDuration($0.checked) }.joined(separator: ", "),
                    "peak RSS of each start's process at the save: "
                        + starts.map { formatMiB($0.peakAtSave) }.joined(separator: ", ") + "; after the check: "
                        + starts.map { formatMiB($0.peak) }.joined(separator: ", "),
                    "set-up \(formatDuration(setup)); each start found and fixed 3 missing files and removed 2 "
                        + "leftovers",
                ])
        }
    }

    /// One read of every record's id and local file, and one listing of the attachments folder.
    private static func floor(_ folder: WorkFolder, count: Int) async throws -> Duration {
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: Device.schema)
        let (rows, elapsed) = try await measure {
            let rows = try await db.getAll(sql: "SELECT id, local_uri FROM attachments") {
                (try $0.getString(name: "id"), try $0.getStringOptional(name: "local_uri"))
            }
            _ = try FileManager.default.contentsOfDirectory(atPath: folder.path("attachments"))
            return rows
        }
        try await db.close()
        guard rows.count >= count else { throw BenchmarkFailure("expected \(count) records, read \(rows.count)") }
        return elapsed
    }

    /// The startup queued the attachments whose files went missing for download, removed the leftovers, and
    /// left every other record synced with its file; the save is a queued upload with its bytes. Read with
    /// SQL once the start's process has exited.
    private static func verify(
        _ folder: WorkFolder, missing: [String], leftovers: [String], saved: String, count: Int
    ) async throws {
        let db = try LocalDatabase.readOnly(path: folder.path("app.sqlite"))
        do {
            try await verify(db, folder: folder, missing: missing, leftovers: leftovers, saved: saved, count: count)
        } catch {
            try? await db.close()
            throw error
        }
        try await db.close()
    }

    private static func verify(
        _ db: LocalDatabase, folder: WorkFolder, missing: [String], leftovers: [String], saved: String, count: Int
    ) async throws {
        for id in missing {
            let row = try await db.getOptional(
                sql: "SELECT state, local_uri FROM attachments WHERE id = ?", parameters: [id]
            ) { (try $0.getInt(name: "state"), try $0.getStringOptional(name: "local_uri")) }
            guard let row, row.0 == AttachmentState.queuedDownload.rawValue, row.1 == nil else {
                throw BenchmarkFailure("\(id) lost its file but was not queued for download again")
            }
        }
        let names = Set(try FileManager.default.contentsOfDirectory(atPath: folder.path("attachments")))
        for name in leftovers where names.contains(name) {
            throw BenchmarkFailure("the leftover \(name) was not removed at startup")
        }
        let counts = try await db.getAll(
            sql: "SELECT state, count(*) AS n FROM attachments WHERE id LIKE 's%' GROUP BY state"
        ) { (try $0.getInt(name: "state"), try $0.getInt(name: "n")) }
        let synced = counts.first { $0.0 == AttachmentState.synced.rawValue }?.1 ?? 0
        let downloads = counts.first { $0.0 == AttachmentState.queuedDownload.rawValue }?.1 ?? 0
        guard synced + downloads == count, synced <= count - 3 else {
            throw BenchmarkFailure(
                "expected \(count) records synced or queued for download, found \(synced) + \(downloads)")
        }
        let record = try await db.getOptional(
            sql: "SELECT state, local_uri FROM attachments WHERE id = ?", parameters: [saved]
        ) { (try $0.getInt(name: "state"), try $0.getStringOptional(name: "local_uri")) }
        guard let record, record.0 == AttachmentState.queuedUpload.rawValue, let name = record.1,
            FileManager.default.contents(
                atPath: name.hasPrefix("/") ? name : folder.file("attachments").appendingPathComponent(name).path)
                == content
        else { throw BenchmarkFailure("the first save after the start was not kept with its bytes") }
    }
}

/// The P10 child (`attachment-sync-bench __p10-child <folder>`): one cold start of an app over the
/// folder's database and attachments; prints `P10-RESULT start=<s> init=<s> check=<s> saved=<id>
/// peak-at-save=<bytes> peak=<bytes>`.
enum ColdStartChild {
    static let command = "__p10-child"
    static let resultPrefix = "P10-RESULT"

    /// Runs one start in a child process and returns what it measured.
    static func run(_ folder: WorkFolder) async throws -> ColdStartScenario.Start {
        let fields = try await ChildProcess.runThisExecutable(
            [command, folder.url.path], resultPrefix: resultPrefix, what: "P10 cold start")
        let values = ChildProcess.namedValues(fields)
        func seconds(_ name: String) throws -> Duration {
            guard let text = values[name], let value = Double(text) else {
                throw BenchmarkFailure("the P10 child printed no \(name)")
            }
            return .seconds(value)
        }
        func bytes(_ name: String) throws -> Int64 {
            guard let text = values[name], let value = Int64(text) else {
                throw BenchmarkFailure("the P10 child printed no \(name)")
            }
            return value
        }
        guard let saved = values["saved"] else { throw BenchmarkFailure("the P10 child printed no saved id") }
        return ColdStartScenario.Start(
            start: try seconds("start"), initialized: try seconds("init"), checked: try seconds("check"),
            saved: String(saved), peakAtSave: try bytes("peak-at-save"), peak: try bytes("peak"))
    }

    static func main(_ arguments: [String]) async -> Int32 {
        guard arguments.count == 1 else {
            printError("usage: attachment-sync-bench \(command) <folder>")
            return 2
        }
        let folder = WorkFolder(existing: URL(fileURLWithPath: arguments[0], isDirectory: true))
        let clock = ContinuousClock()
        let start = clock.now
        let device: Device
        do {
            device = try Device(in: folder, remote: InMemoryRemoteStorage())
        } catch {
            printError("P10: cannot open the app: \(error)")
            return 1
        }
        do {
            try await device.queue.waitForInit()
            let initialized = clock.now
            let saved = try await device.queue.saveFile(
                data: ColdStartScenario.content, mediaType: "application/octet-stream", fileExtension: "bin")
            let firstSave = clock.now
            let peakAtSave = Memory.peakResidentBytes() ?? 0
            try await device.queue.waitForStartupCheck()
            let checked = clock.now
            await device.close()
            let format = { (instant: ContinuousClock.Instant) in String(format: "%.6f", (instant - start).seconds) }
            print(
                "\(resultPrefix) start=\(format(firstSave)) init=\(format(initialized)) check=\(format(checked)) "
                    + "saved=\(saved.id) peak-at-save=\(peakAtSave) peak=\(Memory.peakResidentBytes() ?? 0)")
            return 0
        } catch {
            await device.close()
            printError("P10: the start failed: \(error)")
            return 1
        }
    }
}
