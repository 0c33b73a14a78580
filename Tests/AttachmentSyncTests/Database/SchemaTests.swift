import Foundation
import GRDB
import Testing

@testable import AttachmentSync

@Suite("Schema")
struct SchemaTests {
    let checklists = Table(
        name: "checklists",
        columns: [.text("description"), .integer("completed"), .text("photo_id")],
        indexes: [.ascending(name: "photo", columns: ["photo_id"])]
    )

    @Test("opening a new file creates every table, column and index, and parent folders")
    func createsTablesOnANewFile() async throws {
        let folder = try TemporaryDirectory()
        let path = folder.path("nested/deeper/app.sqlite")
        let db = try LocalDatabase(path: path, schema: Schema(tables: [checklists, createAttachmentTable()]))
        defer { try? db.close() }

        #expect(FileManager.default.fileExists(atPath: path))
        let columns = try await db.getAll(
            sql: "SELECT name, type, pk, \"notnull\" FROM pragma_table_info('checklists')"
        ) {
            "\(try $0.getString(name: "name")):\(try $0.getString(name: "type")):\(try $0.getInt(name: "pk")):\(try $0.getInt(name: "notnull"))"
        }
        #expect(columns == ["id:TEXT:1:1", "description:TEXT:0:0", "completed:INTEGER:0:0", "photo_id:TEXT:0:0"])

        let attachmentColumns = try await db.getAll(sql: "SELECT name FROM pragma_table_info('attachments')") {
            try $0.getString(name: "name")
        }
        #expect(
            attachmentColumns == [
                "id", "filename", "local_uri", "timestamp", "size", "media_type", "state", "has_synced", "meta_data",
                "content_hash", "attempts", "next_attempt_at", "last_error", "on_demand", "pinned", "last_used_at",
                "given_up", "awaiting_upload", "connectivity_failure", "local_unavailable", "key_unavailable",
            ])

        let indexes = try await db.getAll(
            sql: "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'checklists' AND sql IS NOT NULL"
        ) { try $0.getString(name: "name") }
        #expect(indexes == ["checklists__photo"])
        let journalMode = try await db.get(sql: "PRAGMA journal_mode") { try $0.getString(name: "journal_mode") }
        #expect(journalMode == "wal")
    }

    @Test("reopening with the same schema changes nothing and keeps the rows")
    func reopeningIsANoOp() async throws {
        let folder = try TemporaryDirectory()
        let path = folder.path("app.sqlite")
        let schema = Schema(tables: [checklists, createAttachmentTable()])

        let first = try LocalDatabase(path: path, schema: schema)
        try await first.execute(
            sql: "INSERT INTO checklists (id, description, completed) VALUES (?, ?, ?)",
            parameters: ["c1", "Fire exits", true]
        )
        let versionBefore = try await first.get(sql: "PRAGMA schema_version") { try $0.getInt(name: "schema_version") }
        try await first.close()

        let second = try LocalDatabase(path: path, schema: schema)
        defer { try? second.close() }
        let versionAfter = try await second.get(sql: "PRAGMA schema_version") { try $0.getInt(name: "schema_version") }
        #expect(versionAfter == versionBefore, "reopening must run no DDL")
        let rows = try await second.getAll(sql: "SELECT id, description, completed FROM checklists") {
            [
                try $0.getString(name: "id"), try $0.getString(name: "description"),
                String(try $0.getBoolean(name: "completed")),
            ]
        }
        #expect(rows == [["c1", "Fire exits", "true"]])
    }

    @Test("a grown schema adds columns, tables and indexes without touching existing data")
    func addsMissingColumnsAndTables() async throws {
        let folder = try TemporaryDirectory()
        let path = folder.path("app.sqlite")
        let v1 = Table(name: "notes", columns: [.text("title")])
        let first = try LocalDatabase(path: path, schema: Schema(tables: [v1]))
        try await first.execute(sql: "INSERT INTO notes (id, title) VALUES ('n1', 'kept')")
        try await first.close()

        let v2 = Table(
            name: "notes",
            columns: [.text("title"), .integer("pinned"), .real("score")],
            indexes: [Index(name: "by_score", columns: [.descending("score"), .ascending("title")])]
        )
        let tags = Table(name: "tags", columns: [.text("label")])
        let second = try LocalDatabase(path: path, schema: Schema(tables: [v2, tags]))
        defer { try? second.close() }

        let note = try await second.get(sql: "SELECT * FROM notes") { cursor in
            (
                try cursor.getString(name: "title"), try cursor.getIntOptional(name: "pinned"),
                try cursor.getDoubleOptional(name: "score")
            )
        }
        #expect(note.0 == "kept")
        #expect(note.1 == nil)
        #expect(note.2 == nil)
        let indexSQL = try await second.get(sql: "SELECT sql FROM sqlite_master WHERE name = 'notes__by_score'") {
            try $0.getString(name: "sql")
        }
        #expect(indexSQL.contains("\"score\" DESC"))
        try await second.execute(sql: "INSERT INTO tags (id, label) VALUES ('t1', 'red')")
        let count = try await second.get(sql: "SELECT count(*) AS n FROM tags") { try $0.getInt(name: "n") }
        #expect(count == 1)
    }

    @Test("a column the schema no longer lists is left in place with its data")
    func neverDropsColumns() async throws {
        let folder = try TemporaryDirectory()
        let path = folder.path("app.sqlite")
        let first = try LocalDatabase(
            path: path, schema: Schema(tables: [Table(name: "notes", columns: [.text("title"), .text("body")])]))
        try await first.execute(sql: "INSERT INTO notes (id, title, body) VALUES ('n1', 't', 'precious')")
        try await first.close()

        let second = try LocalDatabase(
            path: path, schema: Schema(tables: [Table(name: "notes", columns: [.text("title")])]))
        defer { try? second.close() }
        let body = try await second.get(sql: "SELECT body FROM notes WHERE id = 'n1'") {
            try $0.getString(name: "body")
        }
        #expect(body == "precious")
    }

    @Test(
        "bad identifiers are typed errors naming the bad name",
        arguments: [
            ("bad-name", "table"), ("1table", "table"), ("", "table"), ("sqlite_master", "table"),
            ("drop table x;--", "table"), (String(repeating: "a", count: 65), "table"), ("naïve", "table"),
        ]
    )
    func rejectsBadTableNames(name: String, kind: String) throws {
        let error = try #require(throws: LocalDatabaseError.self) {
            try LocalDatabase.inMemory(schema: Schema(tables: [Table(name: name, columns: [])]))
        }
        #expect(error.code == .invalidIdentifier)
        #expect(error.name == name)
        #expect(error.message.contains(kind))
    }

    @Test("bad column and index names are typed errors naming the bad name")
    func rejectsBadColumnAndIndexNames() throws {
        let badColumn = try #require(throws: LocalDatabaseError.self) {
            try LocalDatabase.inMemory(schema: Schema(tables: [Table(name: "t", columns: [.text("has space")])]))
        }
        #expect(badColumn.code == .invalidIdentifier)
        #expect(badColumn.name == "has space")

        let badIndex = try #require(throws: LocalDatabaseError.self) {
            try LocalDatabase.inMemory(
                schema: Schema(tables: [
                    Table(name: "t", columns: [.text("a")], indexes: [.ascending(name: "x\"y", columns: ["a"])])
                ]))
        }
        #expect(badIndex.code == .invalidIdentifier)
        #expect(badIndex.name == "x\"y")
    }

    @Test("contradictory schemas are typed errors naming the culprit")
    func rejectsContradictorySchemas() throws {
        let cases: [(Schema, String)] = [
            (Schema(tables: [Table(name: "t", columns: [.text("id")])]), "id"),
            (Schema(tables: [Table(name: "t", columns: [.text("a"), .integer("A")])]), "A"),
            (Schema(tables: [Table(name: "t", columns: []), Table(name: "T", columns: [])]), "T"),
            (
                Schema(tables: [
                    Table(name: "t", columns: [.text("a")], indexes: [.ascending(name: "i", columns: ["b"])])
                ]), "b"
            ),
            (Schema(tables: [Table(name: "t", columns: [.text("a")], indexes: [Index(name: "i", columns: [])])]), "i"),
        ]
        for (schema, culprit) in cases {
            let error = try #require(throws: LocalDatabaseError.self) { try LocalDatabase.inMemory(schema: schema) }
            #expect(error.code == .invalidSchema)
            #expect(error.name == culprit)
        }
    }

    @Test("an empty path or a path under a file is a typed error naming the path")
    func rejectsBadPaths() throws {
        let empty = try #require(throws: LocalDatabaseError.self) {
            try LocalDatabase(path: "", schema: Schema(tables: []))
        }
        #expect(empty.code == .invalidPath)

        let folder = try TemporaryDirectory()
        let file = folder.path("plain-file")
        try Data("x".utf8).write(to: URL(fileURLWithPath: file))
        let underFile = try #require(throws: LocalDatabaseError.self) {
            try LocalDatabase(path: file + "/db.sqlite", schema: Schema(tables: []))
        }
        #expect(underFile.code == .invalidPath)
        #expect(underFile.path == file + "/db.sqlite")
    }

    @Test("an app's own GRDB queue can be adopted, and both APIs see the same rows")
    func adoptsAnExistingWriter() async throws {
        let folder = try TemporaryDirectory()
        let queue = try DatabaseQueue(path: folder.path("app.sqlite"))
        try await queue.write { db in
            try db.execute(sql: "CREATE TABLE legacy (id TEXT PRIMARY KEY NOT NULL, name TEXT)")
            try db.execute(sql: "INSERT INTO legacy (id, name) VALUES ('a', 'from GRDB')")
        }
        let db = try LocalDatabase(
            writer: queue, schema: Schema(tables: [Table(name: "legacy", columns: [.text("name"), .integer("rank")])]))
        defer { try? db.close() }

        try await db.execute(sql: "UPDATE legacy SET rank = 7 WHERE id = 'a'")
        let rank = try await queue.read { db in try Int.fetchOne(db, sql: "SELECT rank FROM legacy WHERE id = 'a'") }
        #expect(rank == 7)
        #expect(db.path == nil)
    }
}
