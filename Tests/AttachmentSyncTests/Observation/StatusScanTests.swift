import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// The status (the queue's and `AttachmentTableReport`'s) sums the table in one scan; the queries it
/// replaced are the oracle: the status query below (what the library ran until 2026-11-27) and the SQL of the
/// largest and invalid-size lists. Random tables with hostile values in every column the status reads must
/// give the same status both ways.
@Suite("the status scan agrees with the status queries")
struct StatusScanTests {
    static let schema = Schema(tables: [createAttachmentTable()])

    /// The status in one query: `GROUP BY` for the sums, the indexed lists after them.
    static func statusSQL(_ store: AttachmentStore) -> String {
        let size = AttachmentStore.countedSizeSQL
        let table = store.table
        return """
            SELECT 0 AS kind, state, count(*) AS n, CAST(total(\(size)) AS INTEGER) AS bytes,
                   CAST(total(CASE WHEN local_uri IS NOT NULL THEN \(size) END) AS INTEGER) AS local,
                   NULL AS id, count(*) - count(size) AS attempts, count(size) - count(\(size)) AS next, NULL AS err,
                   NULL AS net, NULL AS lfs, NULL AS kua
            FROM \(table) GROUP BY state
            UNION ALL
            SELECT 3, 1, count(*), CAST(total(\(size)) AS INTEGER), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL
            FROM \(table) WHERE local_uri IS NOT NULL AND coalesce(has_synced, 0) = 0 AND state IN (1, 4)
            UNION ALL
            SELECT 4, 0, count(*), CAST(total(\(size)) AS INTEGER), 0, class, NULL, NULL, NULL, NULL, NULL, NULL
            FROM (SELECT size, \(AttachmentStore.cacheClassSQL) AS class FROM \(table) WHERE local_uri IS NOT NULL)
            GROUP BY class
            UNION ALL

            """ + store.statusListsSQL
    }

    /// Values of any storage class, weighted towards the ones that decide something.
    static func pick(_ values: [SqlValue], _ random: inout SplitMix64) -> SqlValue {
        values[Int(random.next() % UInt64(values.count))]
    }

    /// A table of `count` random records.
    static func fill(_ db: LocalDatabase, count: Int, random: inout SplitMix64) async throws {
        let letters = ["a", "B", "z", "é", "ä", "0", "~", "Z", "e\u{301}"]
        var ids = Set<String>()
        while ids.count < count {
            let length = 1 + Int(random.next() % 3)
            ids.insert((0..<length).map { _ in letters[Int(random.next() % UInt64(letters.count))] }.joined())
        }
        var rows: [[SqlValue]] = []
        for id in ids.sorted() {
            rows.append([
                .text(id),
                pick([0, 1, 2, 3, 4, 3, 3, 4, 7, -1].map { SqlValue.integer($0) }, &random),
                pick(
                    [
                        .null, .integer(0), .integer(1), .integer(2), .integer(100), .integer(100), .integer(.max),
                        .integer(-5), .real(1.5), .text("12x"), .blob(Data([1, 2])),
                    ], &random),
                pick([.null, .text("f.bin"), .text("g.bin")], &random),
                pick([.null, .integer(0), .integer(1), .integer(2), .real(0), .text("yes")], &random),
                pick([.null, .integer(0), .integer(1), .real(1), .text("on")], &random),
                pick([.null, .integer(0), .integer(1), .integer(1)], &random),
                pick([.null, .null, .integer(0), .integer(1)], &random),
                pick([.null, .null, .integer(5), .integer(9)], &random),
            ])
        }
        let inserted = rows
        try await db.writeTransaction { tx in
            for row in inserted {
                try tx.execute(
                    sql: """
                        INSERT INTO attachments (id, state, size, local_uri, has_synced, pinned, on_demand, given_up,
                            next_attempt_at, filename, timestamp, attempts, last_error)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?1 || '.bin', 0, 1, 'e')
                        """,
                    parameters: row.map { $0 as (any SqlValueConvertible)? })
            }
        }
    }

    @Test("random tables with hostile values: the same totals, retries, give-ups, largest and invalid sizes")
    func randomTables() async throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["ATTACHMENT_SYNC_STATUS_SEED"] ?? "") ?? 0x5747_5553
        var random = SplitMix64(seed: seed)
        for history in 0..<40 {
            let db = try LocalDatabase.inMemory(schema: Self.schema)
            defer { try? db.close() }
            let count = Int(random.next() % 120)
            try await Self.fill(db, count: count, random: &random)
            let largest = Int(random.next() % 6)
            let budget: Int64? = random.next() % 2 == 0 ? nil : 150
            // The report's reads, without its look-up of the largest records (which reads whole records and
            // refuses a state that is not one, as it did before the scan); and the queue's.
            let store = AttachmentStore(table: "attachments")
            let (scan, lists, queueRows) = try await db.readTransaction { tx in
                (
                    try store.statusScan(
                        largest: largest, invalidLimit: AttachmentTableReport.invalidSizesListed, in: tx),
                    try tx.getAll(sql: store.statusListsSQL) { try AttachmentStore.statusRow($0) },
                    try store.statusRows(in: tx)
                )
            }
            let status = AttachmentQueue.snapshot(scan.rows + lists, progress: nil, budget: budget)
            let queueStatus = AttachmentQueue.snapshot(queueRows, progress: nil, budget: budget)

            let (rows, largestIds, invalid, total) = try await db.readTransaction { tx in
                (
                    try tx.getAll(sql: Self.statusSQL(store)) { try AttachmentStore.statusRow($0) },
                    try tx.getAll(
                        sql: "SELECT id FROM attachments WHERE \(AttachmentStore.countedSizeSQL) IS NOT NULL "
                            + "ORDER BY size DESC, id LIMIT ?", parameters: [largest]
                    ) { try $0.getString(name: "id") },
                    try tx.getAll(
                        sql: "SELECT id, size FROM attachments WHERE \(AttachmentStore.invalidSizeSQL) ORDER BY id "
                            + "LIMIT ?", parameters: [AttachmentTableReport.invalidSizesListed]
                    ) { (try $0.getString(name: "id"), try $0.getValue(name: "size")) },
                    try tx.get(sql: "SELECT count(*) AS n FROM attachments") { try $0.getInt(name: "n") }
                )
            }
            let expected = AttachmentQueue.snapshot(rows, progress: nil, budget: budget)
            let context = "seed \(seed), history \(history)"
            #expect(scan.recordCount == total, "\(context)")
            #expect(status.states == expected.states, "\(context)")
            #expect(status.localContentBytes == expected.localContentBytes, "\(context)")
            #expect(status.localOnly == expected.localOnly, "\(context)")
            #expect(status.cache == expected.cache, "\(context)")
            #expect(status.waitingForRetry == expected.waitingForRetry, "\(context)")
            #expect(status.givenUp == expected.givenUp, "\(context)")
            #expect(queueStatus.states == expected.states, "\(context)")
            #expect(queueStatus.cache == expected.cache, "\(context)")
            #expect(queueStatus.localOnly == expected.localOnly, "\(context)")
            #expect(queueStatus.waitingForRetry == expected.waitingForRetry, "\(context)")
            #expect(scan.largestIds == largestIds, "\(context)")
            #expect(scan.invalidSizes.map(\.id) == invalid.map(\.0), "\(context)")
            #expect(scan.invalidSizes.map(\.size) == invalid.map(\.1), "\(context)")

            // A short list of invalid sizes keeps the first ids, whatever order the scan meets them in.
            let limit = Int(random.next() % 4)
            let short = try await db.readTransaction { tx in
                try store.statusScan(largest: 0, invalidLimit: limit, in: tx)
            }
            #expect(short.invalidSizes.map(\.id) == Array(invalid.map(\.0).prefix(limit)), "\(context)")
            #expect(short.largestIds.isEmpty, "\(context)")
        }
    }

    @Test("the report lists the largest records as the scan found them, with their details")
    func reportLargest() async throws {
        let db = try LocalDatabase.inMemory(schema: Self.schema)
        defer { try? db.close() }
        for (id, size) in [("a", 5), ("b", 9), ("c", 9), ("d", 1), ("e", 7)] {
            try await db.execute(
                sql: "INSERT INTO attachments (id, filename, state, size, local_uri, has_synced, timestamp) "
                    + "VALUES (?, ?, 3, ?, ?, 1, 0)",
                parameters: [id, id + ".jpg", size, id == "c" ? "c.jpg" : nil])
        }
        let report = try await AttachmentTableReport.read(from: db, largest: 3)
        #expect(report.recordCount == 5)
        #expect(report.largest.map(\.id) == ["b", "c", "e"])
        #expect(report.largest.map(\.filename) == ["b.jpg", "c.jpg", "e.jpg"])
        #expect(report.largest.map(\.contentAvailable) == [false, true, false])
        #expect(report.status.states[.synced]?.bytes == 31)
    }

    @Test("a record whose state is not an integer fails the report with a typed error naming the column")
    func stateNotAnInteger() async throws {
        let db = try LocalDatabase.inMemory(schema: Self.schema)
        defer { try? db.close() }
        try await db.execute(
            sql: "INSERT INTO attachments (id, filename, state, timestamp) VALUES ('a', 'a.bin', 'synced', 0)")
        let error = await #expect(throws: LocalDatabaseError.self) {
            _ = try await AttachmentTableReport.read(from: db)
        }
        #expect(error?.name == "state")
    }
}
