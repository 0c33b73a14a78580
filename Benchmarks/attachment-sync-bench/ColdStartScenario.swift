import AttachmentSync
import AttachmentSyncTesting
import Foundation

/// P10: a cold start over a large table. 100,000 (10,000) synced attachments, each with its file, are set
/// up with SQL (as in P13); then, three times, the app starts again: the database is opened, a queue is made
/// over it, and the time runs until `waitForInit()` returns and a first `saveFile` has returned (the queue
/// is then ready to accept saves and start transfers). Before each start, what the startup check must find
/// and fix is left for it: three synced attachments lose their file (they must be queued for download
/// again), and a leftover temporary file and a file named like a generated attachment that no record
/// claims are put in the folder (both must be removed). The figure is the median start. With the default
/// ``AttachmentQueue/Configuration/startupFileCheck`` a table this large is checked in the background (the
/// queued records before the queue is ready); the time until ``AttachmentQueue/waitForStartupCheck()``
/// returns is shown too, and the fixes are checked after it. For comparison, the floor: one read of every
/// record's id and local file, and one listing of the folder.
enum ColdStartScenario {
    /// The most a start may take at the full size.
    static let targetMilliseconds = 100.0
    /// The bytes of every file.
    static let content = Data("8 bytes!".utf8)
    /// SHA-256 of ``content``, in hex.
    static let contentSHA256 = QueueLengthScenario.contentSHA256
    /// Starts timed.
    static let rounds = 3

    /// Runs P10.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let count = size == .full ? 100_000 : 10_000
        return try await withWorkFolder("p10") { folder in
            let remote = InMemoryRemoteStorage()
            let (_, setup) = try await measure {
                try await withDevice(in: folder, remote: remote) { device in
                    try await populateRecords(
                        device, count: count, state: .synced, prefix: "s", content: content, sha256: contentSHA256)
                    try await device.queue.waitForInit()
                }
            }
            var starts: [Duration] = []
            var inits: [Duration] = []
            var checks: [Duration] = []
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
                let clock = ContinuousClock()
                let start = clock.now
                let device = try Device(in: folder, remote: remote)
                do {
                    try await device.queue.waitForInit()
                    let initialized = clock.now
                    let saved = try await device.queue.saveFile(
                        data: content, mediaType: "application/octet-stream", fileExtension: "bin")
                    starts.append(clock.now - start)
                    inits.append(initialized - start)
                    try await device.queue.waitForStartupCheck()
                    checks.append(clock.now - start)
                    try await verify(device, missing: missing, leftovers: leftovers, saved: saved.id, count: count)
                } catch {
                    await device.close()
                    throw error
                }
                await device.close()
            }
            let start = median(starts)
            let floor = median(floors)
            let label = count >= 1000 ? "\(count / 1000)k" : "\(count)"
            return ScenarioReport(
                title: "cold start over \(formatCount(count)) attachments, until a first saveFile has returned",
                figures: "\(formatDuration(start)) (median of \(rounds); the floor, one read of the table and one "
                    + "listing of the folder: \(formatDuration(floor)))",
                result: "\(formatRatio(start.seconds / floor.seconds)) the floor",
                target: "target ≤ \(Int(targetMilliseconds)) ms at \(label)",
                verdict: start.milliseconds <= targetMilliseconds ? .pass : .miss,
                details: [
                    "starts: " + starts.map(formatDuration).joined(separator: ", ") + "; of which until waitForInit "
                        + "returned: " + inits.map(formatDuration).joined(separator: ", "),
                    "the whole startup check (in the background) done after: "
                        + checks.map(formatDuration).joined(separator: ", "),
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
    /// left every other record synced with its file; the save is a queued upload with its bytes.
    private static func verify(
        _ device: Device, missing: [String], leftovers: [String], saved: String, count: Int
    ) async throws {
        for id in missing {
            guard let attachment = try await device.queue.attachment(id: id), attachment.state == .queuedDownload,
                attachment.localUri == nil
            else { throw BenchmarkFailure("\(id) lost its file but was not queued for download again") }
        }
        let names = Set(try FileManager.default.contentsOfDirectory(atPath: device.attachmentsDirectory.path))
        for name in leftovers where names.contains(name) {
            throw BenchmarkFailure("the leftover \(name) was not removed at startup")
        }
        let synced = try await device.count(in: .synced)
        let downloads = try await device.count(in: .queuedDownload)
        guard synced + downloads == count, synced <= count - 3 else {
            throw BenchmarkFailure(
                "expected \(count) records synced or queued for download, found \(synced) + \(downloads)")
        }
        guard let attachment = try await device.queue.attachment(id: saved), attachment.state == .queuedUpload,
            let path = attachment.localUri, FileManager.default.contents(atPath: path) == content
        else { throw BenchmarkFailure("the first save after the start was not kept with its bytes") }
    }
}
