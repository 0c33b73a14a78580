import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// The record reader the scheduler's reads use looks columns up once per query, then reads by position:
/// it must read what a lookup by name reads, whatever order or subset of columns a query selects, and
/// fail the same way on values of the wrong type.
@Suite("Attachment record reader")
struct AttachmentRecordReaderTests {
    static let names = ["id"] + AttachmentColumn.allCases.map(\.name)

    /// A table of `count` records with random values (or NULL) of the right type in every column.
    private func populated(_ folder: TemporaryDirectory, count: Int, seed: UInt64) async throws -> LocalDatabase {
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: Schema(tables: [createAttachmentTable()]))
        var random = SplitMix64(seed: seed)
        let rows: [SqlParameters] = (0..<count).map { index in
            func maybe(_ value: any SqlValueConvertible) -> (any SqlValueConvertible)? {
                Int.random(in: 0..<3, using: &random) == 0 ? nil : value
            }
            let number = Int64.random(in: -5...1_000_000, using: &random)
            return [
                "r\(index)-é", maybe("f\(index).jpg"), maybe("r\(index).jpg"), maybe(number), maybe(number / 3),
                maybe("image/jpeg"), Int.random(in: 0...4, using: &random), maybe(Int64(index % 2)), maybe("{\"a\":1}"),
                maybe(String(repeating: "a", count: 64)), maybe(Int64(index % 7)), maybe(number + 1), maybe("boom"),
                maybe(Int64(index % 2)), maybe(Int64(index % 3)), maybe(number - 1), maybe(Int64(index % 5)),
                maybe(Int64(index % 2)), maybe(Int64(index % 4)), maybe(Int64(1)), maybe(Int64(2)),
            ]
        }
        let marks = Array(repeating: "?", count: Self.names.count).joined(separator: ", ")
        try await db.writeTransaction { tx in
            for row in rows {
                try tx.execute(
                    sql: "INSERT INTO attachments (\(Self.names.joined(separator: ", "))) VALUES (\(marks))",
                    parameters: row)
            }
        }
        return db
    }

    /// A record read column by column, by name, with the public getters, in the order the reader reads
    /// them: the oracle. A column the query does not select is an error, the first one missing named.
    private static func byName(_ cursor: SqlCursor) throws -> AttachmentRecord {
        func has(_: String) -> Bool { true }
        let id = try cursor.getString(name: "id")
        var record = AttachmentRecord(
            id: id,
            filename: has("filename") ? try cursor.getStringOptional(name: "filename") ?? id : id,
            state: try #require(AttachmentState(rawValue: try cursor.getInt(name: "state"))),
            timestamp: has("timestamp") ? try cursor.getInt64Optional(name: "timestamp") ?? 0 : 0,
            hasSynced: has("has_synced") ? try cursor.getBooleanOptional(name: "has_synced") ?? false : false,
            localPath: has("local_uri") ? try cursor.getStringOptional(name: "local_uri") : nil,
            mediaType: has("media_type") ? try cursor.getStringOptional(name: "media_type") : nil,
            size: has("size") ? try cursor.getInt64Optional(name: "size") : nil,
            metaData: has("meta_data") ? try cursor.getStringOptional(name: "meta_data") : nil,
            contentHash: has("content_hash") ? try cursor.getStringOptional(name: "content_hash") : nil)
        if has("attempts") { record.attempts = try cursor.getIntOptional(name: "attempts") ?? 0 }
        if has("next_attempt_at") { record.nextAttemptAt = try cursor.getInt64Optional(name: "next_attempt_at") }
        if has("last_error") { record.lastError = try cursor.getStringOptional(name: "last_error") }
        if has("on_demand") { record.onDemand = try cursor.getBooleanOptional(name: "on_demand") ?? false }
        if has("pinned") { record.pinned = try cursor.getBooleanOptional(name: "pinned") ?? false }
        if has("last_used_at") { record.lastUsedAt = try cursor.getInt64Optional(name: "last_used_at") }
        if has("given_up") {
            record.givenUp = try cursor.getIntOptional(name: "given_up").flatMap(AttachmentState.init(rawValue:))
        }
        if has("awaiting_upload") { record.awaitingUpload = try cursor.getIntOptional(name: "awaiting_upload") }
        if has("connectivity_failure") {
            record.connectivityFailures = try cursor.getIntOptional(name: "connectivity_failure")
        }
        if has("local_unavailable") { record.localUnavailable = try cursor.getIntOptional(name: "local_unavailable") }
        if has("key_unavailable") { record.keyUnavailable = try cursor.getIntOptional(name: "key_unavailable") }
        return record
    }

    /// What a read gave: the records, or the error's code and column.
    struct Outcome: Equatable, Sendable {
        var records: [AttachmentRecord] = []
        var failure: String?
    }

    static func outcome(_ read: () throws -> [AttachmentRecord]) -> Outcome {
        do {
            return Outcome(records: try read())
        } catch let error as LocalDatabaseError {
            return Outcome(failure: "\(error.code) \(error.name ?? "-")")
        } catch {
            return Outcome(failure: "\(error)")
        }
    }

    @Test("one reader over queries of every column order and subset reads what lookups by name read", arguments: 1...6)
    func readsByPositionAsByName(seed: UInt64) async throws {
        let folder = try TemporaryDirectory()
        let db = try await populated(folder, count: 200, seed: seed)
        defer { try? db.close() }
        var random = SplitMix64(seed: seed &* 7919)
        var queries: [String] = []
        for round in 0..<6 {
            // Every column in a random order, or id, state and a random subset; upper case now and then.
            var columns = Self.names.shuffled(using: &random)
            if round.isMultiple(of: 2) {
                columns = columns.filter { $0 == "id" || $0 == "state" || Bool.random(using: &random) }
            }
            let list = columns.map { Bool.random(using: &random) ? $0.uppercased() : $0 }.joined(separator: ", ")
            queries.append("SELECT \(list) FROM attachments ORDER BY id")
        }
        let reads = queries
        // One reader for all the queries, in one transaction.
        let (positional, named) = try await db.readTransaction { tx in
            var reader = AttachmentRecord.Reader()
            var positional: [Outcome] = []
            var named: [Outcome] = []
            for sql in reads {
                positional.append(Self.outcome { try tx.getAll(sql: sql) { try reader.read($0) } })
                named.append(Self.outcome { try tx.getAll(sql: sql) { try Self.byName($0) } })
            }
            return (positional, named)
        }
        for (index, sql) in queries.enumerated() {
            #expect(positional[index].records.count == (positional[index].failure == nil ? 200 : 0))
            #expect(positional[index] == named[index], "\(sql)")
        }
        // The full selections read every record; the subsets fail on a missing column.
        #expect(positional.enumerated().allSatisfy { $0.offset.isMultiple(of: 2) || $0.element.failure == nil })
    }

    @Test("a value of the wrong type or a missing column fails as the named read does, naming the attachment")
    func wrongTypesFail() async throws {
        let folder = try TemporaryDirectory()
        let db = try await populated(folder, count: 3, seed: 1)
        defer { try? db.close() }
        try await db.execute(sql: "UPDATE attachments SET size = 'big' WHERE id = 'r1-é'")
        let error = await #expect(throws: LocalDatabaseError.self) {
            try await db.readTransaction { tx in
                var reader = AttachmentRecord.Reader()
                return try tx.getAll(sql: "SELECT \(AttachmentRecord.columns) FROM attachments ORDER BY id") {
                    try reader.read($0)
                }
            }
        }
        #expect(error?.code == .typeMismatch)
        #expect(error?.name == "size")
        #expect(error?.message.contains("attachment \"r1-é\"") == true)
        #expect(error?.message.contains("\"size\" holds TEXT") == true)

        try await db.execute(sql: "UPDATE attachments SET size = NULL, state = 9 WHERE id = 'r1-é'")
        let unknown = await #expect(throws: LocalDatabaseError.self) {
            try await db.readTransaction { tx in
                try tx.getAll(sql: "SELECT \(AttachmentRecord.columns) FROM attachments ORDER BY id") {
                    try AttachmentRecord(cursor: $0)
                }
            }
        }
        #expect(unknown?.code == .typeMismatch)
        #expect(unknown?.name == "state")

        let missing = await #expect(throws: LocalDatabaseError.self) {
            try await db.readTransaction { tx in
                var reader = AttachmentRecord.Reader()
                return try tx.getAll(sql: "SELECT id, filename FROM attachments") { try reader.read($0) }
            }
        }
        #expect(missing?.code == .columnNotFound)
        #expect(missing?.name == "state")
    }
}
