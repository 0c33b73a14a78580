import Foundation
import Testing

@testable import AttachmentSync

@Suite("LocalDatabase statements, cursors and transactions")
struct LocalDatabaseTests {
    static let values = Table(
        name: "vals",
        columns: [.text("t"), .integer("i"), .integer("big"), .real("r"), .integer("flag"), .text("bytes")]
    )

    func openFileDatabase(_ folder: TemporaryDirectory) throws -> LocalDatabase {
        try LocalDatabase(path: folder.path("db.sqlite"), schema: Schema(tables: [Self.values]))
    }

    struct ValueRow: Equatable, Sendable {
        var t: String?
        var i: Int?
        var big: Int64?
        var r: Double?
        var flag: Bool?
        var bytes: Data?
    }

    func readRow(_ db: LocalDatabase, id: String) async throws -> ValueRow {
        try await db.get(sql: "SELECT * FROM vals WHERE id = ?", parameters: [id]) { c in
            ValueRow(
                t: try c.getStringOptional(name: "t"), i: try c.getIntOptional(name: "i"),
                big: try c.getInt64Optional(name: "big"), r: try c.getDoubleOptional(name: "r"),
                flag: try c.getBooleanOptional(name: "flag"), bytes: try c.getDataOptional(name: "bytes"))
        }
    }

    @Test("an app's mapper may run the same query again inside its own rows; the queue's cached reads match")
    func nestedQueriesAndCachedStatements() async throws {
        let folder = try TemporaryDirectory()
        let db = try openFileDatabase(folder)
        defer { try? db.close() }
        try await db.writeTransaction { tx in
            for index in 0..<5 {
                try tx.execute(sql: "INSERT INTO vals (id, i) VALUES (?, ?)", arguments: ["v\(index)", index])
            }
        }
        let sql = "SELECT i FROM vals ORDER BY i"
        let pairs = try await db.readTransaction { tx in
            try tx.getAll(sql: sql) { outer in
                let inner = try tx.getAll(sql: sql) { try $0.getInt(name: "i") }
                return (try outer.getInt(name: "i"), inner)
            }
        }
        #expect(pairs.map(\.0) == [0, 1, 2, 3, 4], "the outer rows are all read")
        #expect(pairs.allSatisfy { $0.1 == [0, 1, 2, 3, 4] })
        // The cached path, run twice on one connection, and after a write in between, reads the same rows.
        let cached = try await db.writeTransaction { tx in
            let first = try tx.cached.getAll(sql: sql) { try $0.getInt(name: "i") }
            try tx.cached.execute(sql: "UPDATE vals SET i = i + 10 WHERE id = ?", parameters: ["v0"])
            let second = try tx.cached.getAll(sql: sql) { try $0.getInt(name: "i") }
            return (first, second)
        }
        #expect(cached.0 == [0, 1, 2, 3, 4])
        #expect(cached.1 == [1, 2, 3, 4, 10])
    }

    @Test("every parameter type round-trips through a real file")
    func roundTripsEveryParameterType() async throws {
        let folder = try TemporaryDirectory()
        let db = try openFileDatabase(folder)
        defer { try? db.close() }
        let bytes = Data([0, 1, 2, 0xFF, 0, 42])
        let text = "Zoë's \"quoted\" 🧾 text; DROP TABLE vals; --"

        let inserted = try await db.execute(
            sql: "INSERT INTO vals (id, t, i, big, r, flag, bytes) VALUES (?, ?, ?, ?, ?, ?, ?)",
            parameters: ["a", text, Int.min, Int64.max, -1.5e-300, true, bytes]
        )
        #expect(inserted == 1)
        let full = try await readRow(db, id: "a")
        #expect(full == ValueRow(t: text, i: Int.min, big: Int64.max, r: -1.5e-300, flag: true, bytes: bytes))

        let nothing: String? = nil
        try await db.execute(
            sql: "INSERT INTO vals (id, t, i, big, r, flag, bytes) VALUES (?, ?, ?, ?, ?, ?, ?)",
            parameters: ["b", nothing, nil, Int32(-7), 0.0, false, Data()]
        )
        let sparse = try await readRow(db, id: "b")
        #expect(sparse == ValueRow(t: nil, i: nil, big: -7, r: 0.0, flag: false, bytes: Data()))

        let raw = try await db.get(sql: "SELECT typeof(bytes) AS kind, bytes FROM vals WHERE id = 'a'") {
            (try $0.getString(name: "kind"), try $0.getValue(name: "bytes"))
        }
        #expect(raw.0 == "blob")
        #expect(raw.1 == .blob(bytes))
    }

    @Test("a plain [String] array and SqlValue work as parameters")
    func acceptsArraysAndSqlValues() async throws {
        let db = try LocalDatabase.inMemory(schema: Schema(tables: [Self.values]))
        let ids = ["x", "y"]
        for id in ids {
            try await db.execute(
                sql: "INSERT INTO vals (id, t) VALUES (?, ?)", parameters: [id, SqlValue.text(id.uppercased())])
        }
        let matched = try await db.getAll(sql: "SELECT t FROM vals WHERE id IN (?, ?) ORDER BY id", parameters: ids) {
            try $0.getString(name: "t")
        }
        #expect(matched == ["X", "Y"])
    }

    @Test("execute reports rows changed by DML and 0 for DDL and queries")
    func executeReportsChanges() async throws {
        let db = try LocalDatabase.inMemory(schema: Schema(tables: [Self.values]))
        for n in 0..<5 {
            #expect(try await db.execute(sql: "INSERT INTO vals (id, i) VALUES (?, ?)", parameters: ["r\(n)", n]) == 1)
        }
        #expect(try await db.execute(sql: "UPDATE vals SET t = 'even' WHERE i % 2 = 0") == 3)
        #expect(try await db.execute(sql: "CREATE TABLE other (id TEXT)") == 0)
        #expect(try await db.execute(sql: "SELECT * FROM vals") == 0)
        #expect(try await db.execute(sql: "DELETE FROM vals WHERE i >= 3") == 2)
        #expect(try await db.execute(sql: "UPDATE vals SET t = 'none' WHERE id = 'missing'") == 0)
    }

    @Test("get throws noRows, getOptional returns nil")
    func getAndGetOptional() async throws {
        let db = try LocalDatabase.inMemory(schema: Schema(tables: [Self.values]))
        let missing = try await db.getOptional(sql: "SELECT t FROM vals WHERE id = ?", parameters: ["nope"]) {
            try $0.getString(name: "t")
        }
        #expect(missing == nil)
        let error = await #expect(throws: LocalDatabaseError.self) {
            _ = try await db.get(sql: "SELECT t FROM vals WHERE id = ?", parameters: ["nope"]) {
                try $0.getString(name: "t")
            }
        }
        #expect(error?.code == .noRows)
        #expect(error?.sql == "SELECT t FROM vals WHERE id = ?")
    }

    @Test("a throwing write transaction rolls every change back; a returning one commits")
    func rollbackOnThrow() async throws {
        struct Abort: Error {}
        let folder = try TemporaryDirectory()
        let db = try openFileDatabase(folder)
        defer { try? db.close() }

        await #expect(throws: Abort.self) {
            try await db.writeTransaction { tx in
                try tx.execute(sql: "INSERT INTO vals (id, t) VALUES (?, ?)", arguments: ["1", "one"])
                try tx.execute(sql: "INSERT INTO vals (id, t) VALUES (?, ?)", parameters: ["2", "two"])
                throw Abort()
            }
        }
        #expect(try await db.getAll(sql: "SELECT id FROM vals") { try $0.getString(name: "id") }.isEmpty)

        let insideCount = try await db.writeTransaction { tx -> Int in
            try tx.execute(sql: "INSERT INTO vals (id, t) VALUES (?, ?)", arguments: ["1", "one"])
            return try tx.get(sql: "SELECT count(*) AS n FROM vals") { try $0.getInt(name: "n") }
        }
        #expect(insideCount == 1)
        #expect(try await db.getAll(sql: "SELECT id FROM vals") { try $0.getString(name: "id") } == ["1"])
    }

    @Test("a SQL error inside a transaction rolls back the earlier statements too")
    func rollbackOnSQLError() async throws {
        let db = try LocalDatabase.inMemory(schema: Schema(tables: [Self.values]))
        try await db.execute(sql: "INSERT INTO vals (id) VALUES ('taken')")
        let error = await #expect(throws: LocalDatabaseError.self) {
            try await db.writeTransaction { tx in
                try tx.execute(sql: "INSERT INTO vals (id) VALUES ('fresh')", arguments: [])
                try tx.execute(sql: "INSERT INTO vals (id) VALUES ('taken')", arguments: [])
            }
        }
        #expect(error?.code == .sqlError)
        #expect(error?.sqliteCode == 19)  // SQLITE_CONSTRAINT
        #expect(
            try await db.getAll(sql: "SELECT id FROM vals ORDER BY id") { try $0.getString(name: "id") } == ["taken"])
    }

    @Test("a read transaction sees data and cannot write")
    func readTransactionIsReadOnly() async throws {
        let folder = try TemporaryDirectory()
        let db = try openFileDatabase(folder)
        defer { try? db.close() }
        try await db.execute(sql: "INSERT INTO vals (id, t) VALUES ('a', 'x')")
        let seen = try await db.readTransaction { tx in
            try tx.getAll(sql: "SELECT t FROM vals") { try $0.getString(name: "t") }
        }
        #expect(seen == ["x"])
        let error = await #expect(throws: LocalDatabaseError.self) {
            try await db.readTransaction { tx in try tx.execute(sql: "DELETE FROM vals", arguments: []) }
        }
        #expect(error?.code == .sqlError)
        #expect(try await db.getAll(sql: "SELECT t FROM vals") { try $0.getString(name: "t") } == ["x"])
    }

    @Test("bad SQL and a wrong parameter count are typed errors carrying the statement")
    func badSQL() async throws {
        let db = try LocalDatabase.inMemory(schema: Schema(tables: [Self.values]))
        let syntax = await #expect(throws: LocalDatabaseError.self) {
            try await db.execute(sql: "INSERTT INTO vals (id) VALUES ('a')")
        }
        #expect(syntax?.code == .sqlError)
        #expect(syntax?.sql == "INSERTT INTO vals (id) VALUES ('a')")
        #expect(syntax?.description.contains("INSERTT") == true)

        let unknownTable = await #expect(throws: LocalDatabaseError.self) {
            _ = try await db.getAll(sql: "SELECT * FROM nowhere") { try $0.getValue(name: "id") }
        }
        #expect(unknownTable?.code == .sqlError)
        #expect(unknownTable?.message.contains("nowhere") == true)

        let arity = await #expect(throws: LocalDatabaseError.self) {
            try await db.execute(sql: "INSERT INTO vals (id, t) VALUES (?, ?)", parameters: ["only one"])
        }
        #expect(arity?.code == .sqlError)
    }

    @Test("cursor errors name the column: missing, NULL, wrong type")
    func cursorErrors() async throws {
        let db = try LocalDatabase.inMemory(schema: Schema(tables: [Self.values]))
        try await db.execute(sql: "INSERT INTO vals (id, t, i) VALUES ('a', 'text', NULL)")

        let missing = await #expect(throws: LocalDatabaseError.self) {
            _ = try await db.get(sql: "SELECT id, t FROM vals") { try $0.getString(name: "photo_id") }
        }
        #expect(missing?.code == .columnNotFound)
        #expect(missing?.name == "photo_id")
        #expect(missing?.message.contains("\"id\", \"t\"") == true)

        let null = await #expect(throws: LocalDatabaseError.self) {
            _ = try await db.get(sql: "SELECT i FROM vals") { try $0.getInt(name: "i") }
        }
        #expect(null?.code == .nullValue)
        #expect(null?.name == "i")

        let mismatch = await #expect(throws: LocalDatabaseError.self) {
            _ = try await db.get(sql: "SELECT t FROM vals") { try $0.getInt64(name: "t") }
        }
        #expect(mismatch?.code == .typeMismatch)
        #expect(mismatch?.name == "t")
        #expect(mismatch?.message.contains("TEXT") == true)

        let blobAsText = await #expect(throws: LocalDatabaseError.self) {
            _ = try await db.get(sql: "SELECT x'00ff' AS b") { try $0.getString(name: "b") }
        }
        #expect(blobAsText?.code == .typeMismatch)
    }

    @Test("column lookup is case-insensitive and an integer reads as a double")
    func cursorConveniences() async throws {
        let db = try LocalDatabase.inMemory(schema: Schema(tables: []))
        let row = try await db.get(sql: "SELECT 3 AS Count, 'a' AS label") { c in
            (try c.getDouble(name: "count"), try c.getString(name: "LABEL"), c.columnNames)
        }
        #expect(row.0 == 3.0)
        #expect(row.1 == "a")
        #expect(row.2 == ["Count", "label"])
    }

    @Test("of two columns whose names differ only in case the leftmost is read; names beyond ASCII match too")
    func duplicateAndNonASCIINames() async throws {
        let db = try LocalDatabase.inMemory(schema: Schema(tables: []))
        let row = try await db.get(sql: "SELECT 1 AS Id, 2 AS id, 3 AS \"Émoi\"") { c in
            (try c.getInt(name: "id"), try c.getInt(name: "ID"), try c.getInt(name: "émoi"))
        }
        #expect(row.0 == 1)
        #expect(row.1 == 1)
        #expect(row.2 == 3)
    }

    @Test("an error thrown by a mapper reaches the caller unchanged")
    func mapperErrorsPassThrough() async throws {
        struct MapperFailure: Error, Equatable { let id: String }
        let db = try LocalDatabase.inMemory(schema: Schema(tables: [Self.values]))
        try await db.execute(sql: "INSERT INTO vals (id) VALUES ('a')")
        await #expect(throws: MapperFailure(id: "a")) {
            _ = try await db.getAll(sql: "SELECT id FROM vals") {
                throw MapperFailure(id: try $0.getString(name: "id"))
            }
        }
    }

    @Test("after close every call throws closed, and closing twice is fine")
    func closing() async throws {
        let folder = try TemporaryDirectory()
        let db = try openFileDatabase(folder)
        try await db.execute(sql: "INSERT INTO vals (id) VALUES ('a')")
        try await db.close()
        try await db.close()
        #expect(db.isClosed)
        let error = await #expect(throws: LocalDatabaseError.self) {
            try await db.execute(sql: "INSERT INTO vals (id) VALUES ('b')")
        }
        #expect(error?.code == .closed)
        #expect(throws: LocalDatabaseError.self) {
            _ = try db.watch(sql: "SELECT id FROM vals") { try $0.getString(name: "id") }
        }

        let reopened = try openFileDatabase(folder)
        defer { try? reopened.close() }
        #expect(try await reopened.getAll(sql: "SELECT id FROM vals") { try $0.getString(name: "id") } == ["a"])
    }
}
