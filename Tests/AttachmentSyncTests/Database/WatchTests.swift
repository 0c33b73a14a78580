import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

@Suite("LocalDatabase.watch")
struct WatchTests {
    static let schema = Schema(tables: [
        Table(name: "watched", columns: [.text("name")]),
        Table(name: "other", columns: [.text("name")]),
    ])

    /// A database of `schema` on a file in `folder`, or in memory.
    static func database(onFile: Bool, in folder: TemporaryDirectory) throws -> LocalDatabase {
        onFile
            ? try LocalDatabase(path: folder.path("db.sqlite"), schema: schema)
            : try LocalDatabase.inMemory(schema: schema)
    }

    @Test("emits the current result first, then after writes to its table", arguments: [true, false])
    func emitsCurrentThenChanges(onFile: Bool) async throws {
        let folder = try TemporaryDirectory()
        let db = try Self.database(onFile: onFile, in: folder)
        defer { try? db.close() }
        try await db.execute(sql: "INSERT INTO watched (id, name) VALUES ('1', 'first')")

        let names = try db.watch(sql: "SELECT name FROM watched ORDER BY id") { try $0.getString(name: "name") }
        let initial = try await withDeadline("the initial result") { try await names.first { _ in true } }
        #expect(initial == ["first"])

        try await db.execute(sql: "INSERT INTO watched (id, name) VALUES ('2', 'second')")
        let updated = try await withDeadline("the result after an insert") { try await names.first { $0.count == 2 } }
        #expect(updated == ["first", "second"])

        try await db.execute(sql: "DELETE FROM watched WHERE id = '1'")
        let deleted = try await withDeadline("the result after a delete") { try await names.first { $0.count == 1 } }
        #expect(deleted == ["second"])
    }

    @Test("each row of a result of many columns and rows maps to its own values, and getAll reads the same")
    func rowsOfManyColumnsMapToTheirOwnValues() async throws {
        let db = try LocalDatabase.inMemory(schema: Self.schema)
        defer { try? db.close() }
        // Values of every storage class, different in every row and column, so a row read at another row's
        // offset (or a column at another column's) shows.
        for row in 0..<50 {
            try await db.execute(
                sql: "INSERT INTO watched (id, name) VALUES (?, ?)",
                parameters: [String(format: "%03d", row), row % 7 == 0 ? nil : "name \(row)"])
        }
        let sql = """
            SELECT id, name, CAST(id AS INTEGER) * 3 AS n, CAST(id AS INTEGER) / 4.0 AS r,
                   CAST(id AS BLOB) AS b FROM watched ORDER BY id
            """
        struct Mapped: Equatable, Sendable {
            var id: String
            var name: String?
            var n: Int
            var r: Double
            var b: Data
        }
        let mapper: @Sendable (SqlCursor) throws -> Mapped = { cursor in
            // Read out of order, and one column twice.
            let r = try cursor.getDouble(name: "r")
            let b = try cursor.getData(name: "b")
            let id = try cursor.getString(name: "id")
            guard try cursor.getString(name: "ID") == id else { throw CancellationError() }
            return Mapped(
                id: id, name: try cursor.getStringOptional(name: "name"), n: try cursor.getInt(name: "n"), r: r, b: b)
        }
        let expected = (0..<50).map { row in
            Mapped(
                id: String(format: "%03d", row), name: row % 7 == 0 ? nil : "name \(row)", n: row * 3,
                r: Double(row) / 4, b: Data(String(format: "%03d", row).utf8))
        }
        let stream = try db.watch(sql: sql, parameters: [], mapper: mapper)
        let watched = try await withDeadline("the initial result") { try await stream.first { _ in true } }
        #expect(watched == expected)
        #expect(try await db.getAll(sql: sql, parameters: [], mapper: mapper) == expected)
    }

    @Test("a cursor kept beyond its mapper call throws cursorExpired instead of reading another row")
    func keptCursorExpires() async throws {
        let db = try LocalDatabase.inMemory(schema: Self.schema)
        defer { try? db.close() }
        try await db.execute(sql: "INSERT INTO watched (id, name) VALUES ('1', 'first'), ('2', 'second')")
        let names = try await db.readTransaction { tx -> [String] in
            // Kept by returning them; one from a transaction's query whose statement is finalized by now.
            let cursors = try tx.getAll(sql: "SELECT name FROM watched ORDER BY id", parameters: []) { $0 }
            var read: [String] = []
            for cursor in cursors {
                let error = #expect(throws: LocalDatabaseError.self) { _ = try cursor.getString(name: "name") }
                #expect(error?.code == .cursorExpired)
                #expect(error?.name == "name")
            }
            // Inside the call, each row reads its own values.
            read = try tx.getAll(sql: "SELECT name FROM watched ORDER BY id", parameters: []) {
                try $0.getString(name: "name")
            }
            return read
        }
        #expect(names == ["first", "second"])
    }

    @Test("a watch of a read passes on a value only when it changed")
    func watchOfAReadSkipsEqualValues() async throws {
        let db = try LocalDatabase.inMemory(schema: Self.schema)
        defer { try? db.close() }
        try await db.execute(sql: "INSERT INTO watched (id, name) VALUES ('1', 'first')")
        let counts = try db.watch(describedBy: "a count") { tx in
            try tx.get(sql: "SELECT count(*) AS n FROM watched", parameters: []) { try $0.getInt(name: "n") }
        }
        var iterator = counts.makeAsyncIterator()
        #expect(try await iterator.next() == 1)
        // A commit to the table that leaves the count as it was: the read runs again, and nothing is passed on
        // (it used to pass on the same count again).
        try await db.execute(sql: "UPDATE watched SET name = 'renamed'")
        let next = Task {
            var iterator = iterator
            return try await iterator.next()
        }
        try await Task.sleep(for: .seconds(1))
        try await db.execute(sql: "INSERT INTO watched (id, name) VALUES ('2', 'second')")
        #expect(try await withDeadline("the count after an insert") { try await next.value } == 2)
    }

    @Test("writes to another table never re-run the query", arguments: [true, false])
    func ignoresOtherTables(onFile: Bool) async throws {
        let folder = try TemporaryDirectory()
        let db = try Self.database(onFile: onFile, in: folder)
        defer { try? db.close() }
        // random() makes every run of the query differ, so each run is an emission that de-duplication
        // cannot hide, and the mapper counts runs exactly.
        let runs = LockedValue(0)
        let counts = try db.watch(sql: "SELECT count(*) AS n, random() AS nonce FROM watched") { cursor in
            runs.withLock { $0 += 1 }
            return try cursor.getInt(name: "n")
        }
        _ = try await withDeadline("the initial result") { try await counts.first { _ in true } }
        try await db.execute(sql: "INSERT INTO watched (id) VALUES ('a')")
        _ = try await withDeadline("the result with one row") { try await counts.first { $0 == [1] } }
        let runsBefore = runs.withLock { $0 }

        for n in 0..<20 {
            try await db.execute(sql: "INSERT INTO other (id, name) VALUES (?, 'noise')", parameters: ["o\(n)"])
        }
        try await db.execute(sql: "INSERT INTO watched (id) VALUES ('b')")
        _ = try await withDeadline("the result with two rows") { try await counts.first { $0 == [2] } }
        #expect(runs.withLock { $0 } == runsBefore + 1, "only the write to the watched table may re-run the query")
    }

    @Test("1,000 writes from 10 concurrent tasks end with the final state")
    func concurrentWritesConverge() async throws {
        let folder = try TemporaryDirectory()
        let db = try LocalDatabase(path: folder.path("db.sqlite"), schema: Self.schema)
        defer { try? db.close() }
        let counts = try db.watch(sql: "SELECT count(*) AS n, max(name) AS last FROM watched") {
            try $0.getInt(name: "n")
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<10 {
                group.addTask {
                    for n in 0..<100 {
                        try await db.execute(
                            sql: "INSERT INTO watched (id, name) VALUES (?, ?)",
                            parameters: ["\(writer)-\(n)", String(format: "%02d-%03d", writer, n)])
                    }
                }
            }
            try await group.waitForAll()
        }
        let final = try await withDeadline("the count of 1,000") { try await counts.first { $0 == [1000] } }
        #expect(final == [1000])
        let stored = try await db.get(sql: "SELECT count(*) AS n FROM watched") { try $0.getInt(name: "n") }
        #expect(stored == 1000)
    }

    @Test("cancelling the consuming task stops the observation and frees it")
    func cancellationFreesTheObservation() async throws {
        let folder = try TemporaryDirectory()
        let db = try LocalDatabase(path: folder.path("db.sqlite"), schema: Self.schema)
        let (started, startedContinuation) = AsyncStream.makeStream(of: Void.self)
        let consumer = Task {
            let stream = try db.watch(sql: "SELECT id FROM watched") { try $0.getString(name: "id") }
            var received = 0
            for try await _ in stream {
                received += 1
                startedContinuation.yield()
            }
            return received
        }
        var startedIterator = started.makeAsyncIterator()
        _ = await startedIterator.next()
        #expect(db.activeWatchCount == 1)

        consumer.cancel()
        _ = try? await consumer.value
        #expect(db.activeWatchCount == 0)
        // With the observation gone, writes still work and the pool closes cleanly.
        try await db.execute(sql: "INSERT INTO watched (id) VALUES ('after')")
        try await db.close()
    }

    @Test("close ends active watches normally")
    func closeEndsWatches() async throws {
        let db = try LocalDatabase.inMemory(schema: Self.schema)
        let stream = try db.watch(sql: "SELECT id FROM watched") { try $0.getString(name: "id") }
        _ = try await withDeadline("the initial result") { try await stream.first { _ in true } }
        try await db.close()
        let remaining = try await withDeadline("the end of the stream") {
            var count = 0
            for try await _ in stream { count += 1 }
            return count
        }
        #expect(remaining <= 1)
        #expect(db.activeWatchCount == 0)
    }

    @Test("bad SQL fails at the call; a failing mapper ends the stream with its typed error")
    func errors() async throws {
        let db = try LocalDatabase.inMemory(schema: Self.schema)
        let bad = #expect(throws: LocalDatabaseError.self) {
            _ = try db.watch(sql: "SELECT nope FROM watched") { try $0.getString(name: "nope") }
        }
        #expect(bad?.code == .sqlError)
        #expect(bad?.sql == "SELECT nope FROM watched")

        let arity = #expect(throws: LocalDatabaseError.self) {
            _ = try db.watch(sql: "SELECT id FROM watched WHERE id = ?", parameters: []) {
                try $0.getString(name: "id")
            }
        }
        #expect(arity?.code == .sqlError)

        try await db.execute(sql: "INSERT INTO watched (id) VALUES ('a')")
        let stream = try db.watch(sql: "SELECT id FROM watched") { try $0.getString(name: "photo_id") }
        let error = await #expect(throws: LocalDatabaseError.self) {
            try await withDeadline("the stream's error") { try await stream.first { _ in true } }
        }
        #expect(error?.code == .columnNotFound)
        #expect(error?.name == "photo_id")
    }
}
