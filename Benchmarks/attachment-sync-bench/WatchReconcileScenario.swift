import AttachmentSync
import AttachmentSyncTesting
import Foundation
import TestSupport

/// P4: how long the queue takes to reconcile one emission of the app's watch when one of N items changed,
/// at two sizes N (100,000 and 1,000,000), through the public API only, each size in a process of its own
/// (``WatchReconcileChild``) so that its peak memory is its own.
///
/// Set-up (not timed): N checklist rows, each referring to its own photo, and N matching `synced`
/// records inserted with SQL in one transaction, plus an 8-byte file per photo so that the queue's startup
/// check keeps them. That is much faster than downloading N files through the queue and gives the same
/// table. The queue follows `SELECT photo_id FROM checklists WHERE photo_id IS NOT NULL`.
///
/// Measured, five times per size: from just before the `UPDATE` that clears one checklist's photo is
/// committed, until a watch of that attachment's record sees it `archived` (the end to end figure); and
/// the queue's share of it: from the moment the app's watch had its emission (the query run again and its
/// rows mapped, noted by an ``EmissionLog`` before the queue gets the items) until the record is seen
/// archived. The figures are the medians. The baseline, measured the same way before the queue starts, is a
/// bare `db.watch` of the same query: commit until the emission with one item fewer arrives. Every archived
/// record and every other record is checked afterwards, and the queue must not have downloaded anything.
/// The peak resident set is the child's from after the set-up until the checks.
enum WatchReconcileScenario {
    /// The changes timed at each size.
    static let samples = 5
    /// The most the queue's share of one emission may take at the large size.
    static let targetMilliseconds = 200.0
    /// The most the large-to-small time ratio may be, for a size ratio of 10, to count as linear.
    static let linearLimit = 15.0

    /// What one size measured.
    struct Figures: Sendable {
        /// Items in the watch.
        var items: Int
        /// Median time from commit to archived record.
        var reconciled: Duration
        /// Median time from the emission of the app's watch to archived record.
        var queueShare: Duration
        /// Median time from commit to the bare watch's emission.
        var bareWatch: Duration
        /// Inserting the rows and files.
        var setup: Duration
        /// The queue's startup (checking N records against their files).
        var startup: Duration
        /// A read of the whole attachments table through `db.getAll`, as the queue's reconcile makes it.
        var tableRead: Duration
        /// The process's peak resident set from after the set-up until the checks.
        var peak: Int64
    }

    /// Runs P4.
    @Sendable static func run(_ size: RunSize) async throws -> ScenarioReport {
        let (smallCount, largeCount) = size == .full ? (100_000, 1_000_000) : (1_000, 10_000)
        let small = try await WatchReconcileChild.run(items: smallCount)
        let large = try await WatchReconcileChild.run(items: largeCount)
        let ratio = large.reconciled.seconds / small.reconciled.seconds
        let met = large.queueShare.milliseconds <= targetMilliseconds && ratio <= linearLimit
        let label = formatSizeLabel
        return ScenarioReport(
            title: "watch emission with 1 change, reconciled",
            figures: "the queue's share \(label(smallCount)) \(formatDuration(small.queueShare)), "
                + "\(label(largeCount)) \(formatDuration(large.queueShare)); commit to archived "
                + "\(formatDuration(small.reconciled)), \(formatDuration(large.reconciled)) (a bare watch of the "
                + "app's query: \(formatDuration(small.bareWatch)), \(formatDuration(large.bareWatch))); peak RSS "
                + "\(formatMiB(small.peak)), \(formatMiB(large.peak))",
            result: String(format: "commit to archived ratio %.1f (linear ≈ 10)", ratio),
            target: "target: the queue's share ≤ \(Int(targetMilliseconds)) ms at \(label(largeCount)), "
                + "ratio ≤ \(Int(linearLimit))",
            verdict: met ? .pass : .miss,
            details: [small, large].map { figures in
                "\(formatCount(figures.items)) items: set-up \(formatDuration(figures.setup)), "
                    + "queue startup \(formatDuration(figures.startup)), "
                    + "commit to archived \(formatDuration(figures.reconciled)), of which the queue's share "
                    + "\(formatDuration(figures.queueShare)); bare watch \(formatDuration(figures.bareWatch)); "
                    + "one read of the whole attachments table \(formatDuration(figures.tableRead)); "
                    + "peak RSS \(formatMiB(figures.peak))"
            })
    }

    /// Sets up `items` rows and records, measures the bare watch, then the queue, and checks the table.
    static func measureEmissions(items count: Int) async throws -> Figures {
        try await withWorkFolder("p4") { folder in
            let remote = InMemoryRemoteStorage()
            let emissions = EmissionLog()
            return try await withDevice(
                in: folder, remote: remote, watchFileExtension: "jpg", emissions: emissions
            ) { device in
                let (_, setup) = try await measure { try await populate(device, count: count) }
                Memory.resetPeakResidentBytes()
                let (_, startup) = try await measure { try await device.queue.waitForInit() }

                // Baseline: rows 0..<samples lose their photo while only a bare watch looks.
                let bare = try await bareWatchEmissions(device, count: count, rows: 0..<samples)

                // The queue's first emission archives those; once it has, the watch is live.
                try await device.queue.startSync()
                for row in 0..<samples {
                    try await device.waitForState(photoID(row), .archived, seconds: 120)
                }
                var reconciled: [Duration] = []
                var shares: [Duration] = []
                for row in samples..<(2 * samples) {
                    let (total, share) = try await timeArchive(device, row: row, emissions: emissions, count: count)
                    reconciled.append(total)
                    shares.append(share)
                }
                try await verify(device, remote: remote, count: count, changed: 2 * samples)
                let peak = Memory.peakResidentBytes() ?? 0
                var reads: [Duration] = []
                for _ in 0..<3 { reads.append(try await timeTableRead(device, count: count)) }
                return Figures(
                    items: count, reconciled: median(reconciled), queueShare: median(shares), bareWatch: median(bare),
                    setup: setup, startup: startup, tableRead: median(reads), peak: peak)
            }
        }
    }

    /// The id of row `row`'s photo.
    static func photoID(_ row: Int) -> String { String(format: "p%06d", row) }

    /// Inserts `count` checklists and `count` synced records in one transaction, and a file per record:
    /// hard links to 8-byte files (at most 50,000 links each, ext4 allows 65,000), since creating 100,000
    /// files one by one (`FileManager.createFile` writes atomically and flushes each) takes minutes on a
    /// virtual disk, and the queue only checks that each file exists.
    private static func populate(_ device: Device, count: Int) async throws {
        try FileManager.default.createDirectory(at: device.attachmentsDirectory, withIntermediateDirectories: true)
        let linksPerFile = 50_000
        for row in 0..<count {
            let original = device.attachmentsDirectory.deletingLastPathComponent()
                .appendingPathComponent("photo-\(row / linksPerFile).jpg")
            if row % linksPerFile == 0 { try Data("8 bytes!".utf8).write(to: original) }
            let path = device.attachmentsDirectory.appendingPathComponent(photoID(row) + ".jpg").path
            try FileManager.default.linkItem(atPath: original.path, toPath: path)
        }
        try await device.db.writeTransaction { tx in
            let sequence = "WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < ?) "
            try tx.execute(
                sql: sequence + """
                    INSERT INTO checklists (id, description, completed, photo_id)
                    SELECT printf('c%06d', i), 'item ' || i, 0, printf('p%06d', i) FROM seq
                    """,
                parameters: [count])
            try tx.execute(
                sql: sequence + """
                    INSERT INTO attachments (id, filename, state, timestamp, has_synced, local_uri, size)
                    SELECT printf('p%06d', i), printf('p%06d.jpg', i), 3, 1700000000000 + i, 1,
                           printf('p%06d.jpg', i), 8 FROM seq
                    """,
                parameters: [count])
        }
    }

    /// The baseline: a bare watch of the queue's query; for each row, the time from just before the commit
    /// that clears its photo until the emission with one item fewer.
    private static func bareWatchEmissions(_ device: Device, count: Int, rows: Range<Int>) async throws -> [Duration] {
        let durations = try await withDeadline(seconds: 300) {
            try await bareWatchEmissionsWithoutDeadline(device, count: count, rows: rows)
        }
        guard let durations else { throw BenchmarkFailure("the bare watch did not see the changes within 300 s") }
        return durations
    }

    /// ``bareWatchEmissions(_:count:rows:)`` without its time limit.
    private static func bareWatchEmissionsWithoutDeadline(
        _ device: Device, count: Int, rows: Range<Int>
    ) async throws -> [Duration] {
        let stream = try device.db.watch(
            options: WatchOptions(
                sql: "SELECT photo_id FROM checklists WHERE photo_id IS NOT NULL",
                parameters: [],
                mapper: { cursor in
                    try WatchedAttachmentItem(id: cursor.getString(name: "photo_id"), fileExtension: "jpg")
                }))
        var emissions = stream.makeAsyncIterator()
        var expected = count
        var durations: [Duration] = []
        try await skip(&emissions, until: { $0.count == expected })
        for row in rows {
            expected -= 1
            let clock = ContinuousClock()
            let start = clock.now
            try await device.db.execute(
                sql: "UPDATE checklists SET photo_id = NULL WHERE id = ?", parameters: [String(format: "c%06d", row)])
            try await skip(&emissions, until: { $0.count == expected })
            durations.append(clock.now - start)
        }
        return durations
    }

    /// Clears row `row`'s photo and times it until a watch sees its record archived; also returns the time
    /// from the app's watch's emission of the change (one item fewer) until then.
    private static func timeArchive(
        _ device: Device, row: Int, emissions: EmissionLog, count: Int
    ) async throws -> (total: Duration, share: Duration) {
        let id = photoID(row)
        let expectedItems = count - row - 1
        let elapsed = try await withDeadline(seconds: 120) { () async throws -> (Duration, Duration) in
            let states = try device.db.watch(sql: "SELECT state FROM attachments WHERE id = ?", parameters: [id]) {
                try $0.getInt(name: "state")
            }
            var iterator = states.makeAsyncIterator()
            guard try await iterator.next() == [AttachmentState.synced.rawValue] else {
                throw BenchmarkFailure("\(id) is not synced before the change")
            }
            let clock = ContinuousClock()
            let start = clock.now
            try await device.db.execute(
                sql: "UPDATE checklists SET photo_id = NULL WHERE id = ?", parameters: [String(format: "c%06d", row)])
            try await skip(&iterator, until: { $0 == [AttachmentState.archived.rawValue] })
            let end = clock.now
            guard let emission = await emissions.last, emission.count == expectedItems, emission.instant >= start
            else { throw BenchmarkFailure("no emission of \(expectedItems) items was noted for the change of \(id)") }
            return (end - start, end - emission.instant)
        }
        guard let elapsed else { throw BenchmarkFailure("\(id) was not archived within 120 s") }
        return elapsed
    }

    /// Where the time goes: one read of the whole attachments table through the public `db.getAll`, with the
    /// columns the queue's records have, each read by name and ordered as the queue orders them. The queue's
    /// reconcile reads the whole table this way for every emission (twice when something changed: once to
    /// decide, once more inside the write transaction).
    private static func timeTableRead(_ device: Device, count: Int) async throws -> Duration {
        let columns = [
            "id", "filename", "state", "timestamp", "has_synced", "local_uri", "media_type", "size", "meta_data",
            "content_hash", "attempts", "next_attempt_at", "last_error",
        ]
        let (rows, elapsed) = try await measure {
            try await device.db.getAll(
                sql: "SELECT \(columns.joined(separator: ", ")) FROM attachments ORDER BY timestamp, id"
            ) { cursor in
                try columns.map { try cursor.getValue(name: $0) }
            }
        }
        guard rows.count == count else { throw BenchmarkFailure("read \(rows.count) records, expected \(count)") }
        return elapsed
    }

    /// Rows `0..<changed` archived with their files kept, every other record still synced, nothing
    /// downloaded.
    private static func verify(_ device: Device, remote: InMemoryRemoteStorage, count: Int, changed: Int) async throws {
        let archived = try await device.db.getAll(sql: "SELECT id FROM attachments WHERE state = 4 ORDER BY id") {
            try $0.getString(name: "id")
        }
        guard archived == (0..<changed).map(photoID) else {
            throw BenchmarkFailure("archived \(archived.prefix(12)), expected the first \(changed) photos")
        }
        let synced = try await device.count(in: .synced)
        guard synced == count - changed else {
            throw BenchmarkFailure("\(synced) records synced, expected \(count - changed)")
        }
        for id in archived {
            let path = device.attachmentsDirectory.appendingPathComponent(id + ".jpg").path
            guard FileManager.default.fileExists(atPath: path) else {
                throw BenchmarkFailure("the cached file of archived \(id) is gone")
            }
        }
        let downloads = await remote.downloadCount
        guard downloads == 0 else { throw BenchmarkFailure("the queue downloaded \(downloads) files it had") }
    }
}

/// The P4 child (`attachment-sync-bench __p4-child <items>`): one size of P4; prints `P4-RESULT` and the
/// figures as `name=value` fields (durations in seconds, the peak in bytes).
enum WatchReconcileChild {
    static let command = "__p4-child"
    static let resultPrefix = "P4-RESULT"

    /// Measures `items` in a child process.
    static func run(items: Int) async throws -> WatchReconcileScenario.Figures {
        let fields = try await ChildProcess.runThisExecutable(
            [command, String(items)], resultPrefix: resultPrefix, what: "P4 (\(formatCount(items)) items)")
        let values = ChildProcess.namedValues(fields)
        func number(_ name: String) throws -> Double {
            guard let text = values[name], let value = Double(text) else {
                throw BenchmarkFailure("the P4 child printed no \(name)")
            }
            return value
        }
        return WatchReconcileScenario.Figures(
            items: items, reconciled: .seconds(try number("reconciled")), queueShare: .seconds(try number("share")),
            bareWatch: .seconds(try number("bare")), setup: .seconds(try number("setup")),
            startup: .seconds(try number("startup")), tableRead: .seconds(try number("table")),
            peak: Int64(try number("peak")))
    }

    static func main(_ arguments: [String]) async -> Int32 {
        guard arguments.count == 1, let items = Int(arguments[0]), items > 2 * WatchReconcileScenario.samples else {
            printError("usage: attachment-sync-bench \(command) <items>")
            return 2
        }
        do {
            let figures = try await WatchReconcileScenario.measureEmissions(items: items)
            let seconds = { (duration: Duration) in String(format: "%.6f", duration.seconds) }
            print(
                "\(resultPrefix) reconciled=\(seconds(figures.reconciled)) share=\(seconds(figures.queueShare)) "
                    + "bare=\(seconds(figures.bareWatch)) setup=\(seconds(figures.setup)) "
                    + "startup=\(seconds(figures.startup)) table=\(seconds(figures.tableRead)) peak=\(figures.peak)")
            return 0
        } catch {
            printError("P4 (\(items) items) failed: \(error)")
            return 1
        }
    }
}
