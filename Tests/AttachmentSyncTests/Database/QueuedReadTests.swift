import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// The reads the queue makes after every finished transfer (the next queued records, the next retry time,
/// the sync trigger's signal): right answers over random tables, and plans that cost the same however
/// long the queue is (an index walk, never a scan of the table or a sort of every queued record).
@Suite("Queued reads")
struct QueuedReadTests {
    static let table = "attachments"
    let store = AttachmentStore(table: QueuedReadTests.table)

    /// A database with `count` records in random states, with random (often equal) timestamps and retry
    /// times around `now`.
    private func populated(
        _ folder: TemporaryDirectory, count: Int, seed: UInt64, analyze: Bool
    ) async throws -> LocalDatabase {
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: Schema(tables: [createAttachmentTable()]))
        var random = SplitMix64(seed: seed)
        let rows: [SqlParameters] = (0..<count).map { index in
            let state = Int.random(in: 0...4, using: &random)
            let retry: Int64? =
                Bool.random(using: &random) ? nil : Int64.random(in: Self.now - 50...Self.now + 50, using: &random)
            return [
                String(format: "r%05d", index), "f\(index).bin", state,
                Int64.random(in: 0...(Int64(count) / 4), using: &random), retry,
            ]
        }
        try await db.writeTransaction { tx in
            for row in rows {
                try tx.execute(
                    sql: "INSERT INTO attachments (id, filename, state, timestamp, next_attempt_at, has_synced) "
                        + "VALUES (?, ?, ?, ?, ?, 0)",
                    parameters: row)
            }
            if analyze { try tx.execute(sql: "ANALYZE", parameters: []) }
        }
        return db
    }

    static let now: Int64 = 1_000

    @Test("the queued read returns uploads and deletes, then downloads, each the oldest due first", arguments: 1...8)
    func queuedReadMatchesAFullSort(seed: UInt64) async throws {
        let folder = try TemporaryDirectory()
        let db = try await populated(folder, count: 600, seed: seed, analyze: seed.isMultiple(of: 2))
        defer { try? db.close() }
        let all = try await db.readTransaction { tx in try store.records(in: tx) }
        func due(_ states: Set<AttachmentState>, limit: Int) -> [String] {
            Array(
                all.filter { states.contains($0.state) && ($0.nextAttemptAt ?? .min) <= Self.now }
                    .sorted { ($0.timestamp, $0.id) < ($1.timestamp, $1.id) }
                    .prefix(limit)
                    .map(\.id))
        }
        for limit in [1, 3, 17, 200, 1_000] {
            let read = try await db.readTransaction { tx in
                try store.queued(limit: limit, readyAt: Self.now, in: tx).map(\.id)
            }
            #expect(
                read == due([.queuedUpload, .queuedDelete], limit: limit) + due([.queuedDownload], limit: limit),
                "limit \(limit)")
        }
        // Records in flight count towards each state's limit (they come first in the scheduler's count) but
        // are left out of what is returned.
        var random = SplitMix64(seed: seed &+ 99)
        let busy = Set(all.map(\.id).filter { _ in Int.random(in: 0..<4, using: &random) == 0 })
        func dueSkipping(_ states: [AttachmentState], limit: Int) -> [String] {
            let kept = states.flatMap { state in
                all.filter { $0.state == state && ($0.nextAttemptAt ?? .min) <= Self.now }
                    .sorted { ($0.timestamp, $0.id) < ($1.timestamp, $1.id) }
                    .prefix(limit)
                    .filter { !busy.contains($0.id) }
            }
            return Array(kept.sorted { ($0.timestamp, $0.id) < ($1.timestamp, $1.id) }.prefix(limit).map(\.id))
        }
        for limit in [1, 3, 17, 200, 1_000] {
            let read = try await db.readTransaction { tx in
                try store.queued(limit: limit, readyAt: Self.now, skipping: busy, in: tx).map(\.id)
            }
            #expect(
                read
                    == dueSkipping([.queuedUpload, .queuedDelete], limit: limit)
                    + dueSkipping([.queuedDownload], limit: limit),
                "limit \(limit), skipping \(busy.count)")
        }
        let soonest = try await db.readTransaction { tx in try store.earliestRetry(after: Self.now, in: tx) }
        #expect(
            soonest
                == all.filter { StateSet.queued.contains($0.state) }.compactMap(\.nextAttemptAt).filter {
                    $0 > Self.now
                }.min())
    }

    @Test("the reads made per finished transfer walk an index: no scan of the table, no sort of the queue")
    func readsAreIndexWalks() async throws {
        for analyze in [false, true] {
            let folder = try TemporaryDirectory()
            let db = try await populated(folder, count: 5_000, seed: 7, analyze: analyze)
            defer { try? db.close() }
            let reads: [(name: String, sql: String, parameters: SqlParameters)] = [
                ("queued", store.queuedSQL, [AttachmentState.queuedUpload.rawValue, Self.now, 10]),
                ("earliest retry", store.earliestRetrySQL, [AttachmentState.queuedDownload.rawValue, Self.now]),
                ("signal", store.queuedSignalSQL, []),
            ]
            for read in reads {
                let plan = try await db.getAll(sql: "EXPLAIN QUERY PLAN " + read.sql, parameters: read.parameters) {
                    try $0.getString(name: "detail")
                }
                #expect(!plan.isEmpty)
                // Allowed: index searches, the scalar subqueries of the signal and their constant row, and a
                // sort of rows with one timestamp (the id tie-break), which stops at the limit.
                let unbounded = plan.filter { step in
                    !(step.hasPrefix("SEARCH") || step.hasPrefix("SCALAR SUBQUERY") || step == "SCAN CONSTANT ROW"
                        || step == "USE TEMP B-TREE FOR RIGHT PART OF ORDER BY")
                }
                #expect(unbounded.isEmpty, "\(read.name) (ANALYZE: \(analyze)): \(plan)")
            }
        }
    }

    @Test("the sync trigger's signal changes when a record enters any queued state")
    func signalChangesOnEntry() async throws {
        let folder = try TemporaryDirectory()
        let db = try await populated(folder, count: 300, seed: 3, analyze: false)
        defer { try? db.close() }
        func signal() async throws -> [SqlValue] {
            try await db.get(sql: store.queuedSignalSQL) { cursor in
                try StateSet.queued.map { try cursor.getValue(name: "latest\($0.rawValue)") }
            }
        }
        var timestamp: Int64 = 1_000_000
        for state in StateSet.queued {
            // A synced record is queued again with a new timestamp (as every queue write gives one).
            let before = try await signal()
            timestamp += 1
            try await db.execute(
                sql:
                    "UPDATE attachments SET state = ?, timestamp = ? WHERE id = (SELECT min(id) FROM attachments WHERE state = 3)",
                parameters: [state.rawValue, timestamp])
            #expect(try await signal() != before, "\(state)")
        }
    }
}
