import Foundation
import GRDB
import Testing

@testable import AttachmentSync

/// What SQLite is asked for around the queue's durable commits (`saveFile(fileURL:…moveFile: true)`,
/// `deleteFile`). The flags change how SQLite flushes on Apple platforms only (`F_FULLFSYNC`); they are
/// checked here, on the connection that commits, where SQLite reads them.
@Suite("Durable commits")
struct DurableCommitTests {
    static let schema = Schema(tables: [Table(name: "notes", columns: [.text("body")])])

    /// The flags of the connection a closure runs on.
    struct Flags: Equatable, Sendable {
        var synchronous: Int
        var fullfsync: Int
        var checkpointFullfsync: Int
    }

    static func flags(_ db: Database) throws -> Flags {
        Flags(
            synchronous: try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1,
            fullfsync: try Int.fetchOne(db, sql: "PRAGMA fullfsync") ?? -1,
            checkpointFullfsync: try Int.fetchOne(db, sql: "PRAGMA checkpoint_fullfsync") ?? -1)
    }

    @Test("a durable commit runs with synchronous FULL and fullfsync on, then both are as before")
    func durableCommitFlags() async throws {
        let folder = try TemporaryDirectory()
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: Self.schema)
        let before = try await db.writer.write { try Self.flags($0) }
        let during = try await db.durableWriteTransaction { tx in
            try tx.execute(sql: "INSERT INTO notes (id, body) VALUES ('a', 'kept')")
            return try tx.get(sql: "PRAGMA fullfsync") { try $0.getInt(name: "fullfsync") }
        }
        let synchronousDuring = try await db.durableWriteTransaction { tx in
            try tx.get(sql: "PRAGMA synchronous") { try $0.getInt(name: "synchronous") }
        }
        let after = try await db.writer.write { try Self.flags($0) }
        #expect(during == 1, "F_FULLFSYNC for the commit on Apple platforms")
        #expect(synchronousDuring == 2, "FULL: the commit is flushed")
        #expect(before.synchronous == 1 && before.fullfsync == 0, "GRDB's WAL defaults: NORMAL, no fullfsync")
        #expect(after == before)
        let body = try await db.get(sql: "SELECT body FROM notes WHERE id = 'a'") { try $0.getString(name: "body") }
        #expect(body == "kept")
        try await db.close()
    }

    @Test("connections of a database file opened here checkpoint with fullfsync; an adopted writer keeps its settings")
    func checkpointFlags() async throws {
        let folder = try TemporaryDirectory()
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: Self.schema)
        #expect(try await db.writer.write { try Self.flags($0) }.checkpointFullfsync == 1)
        #expect(try await db.writer.read { try Self.flags($0) }.checkpointFullfsync == 1)
        try await db.close()
        let existing = try LocalDatabase.existing(path: folder.path("app.sqlite"))
        #expect(try await existing.writer.write { try Self.flags($0) }.checkpointFullfsync == 1)
        try await existing.close()

        let pool = try DatabasePool(path: folder.path("app.sqlite"))
        let adopted = try LocalDatabase(writer: pool, schema: Self.schema)
        let own = try await pool.write { try Self.flags($0) }
        let during = try await adopted.durableWriteTransaction { tx in
            try tx.get(sql: "PRAGMA fullfsync") { try $0.getInt(name: "fullfsync") }
        }
        #expect(during == 1, "the durable commit asks for fullfsync on an adopted writer too")
        #expect(try await pool.write { try Self.flags($0) } == own)
        try await adopted.close()
    }
}
