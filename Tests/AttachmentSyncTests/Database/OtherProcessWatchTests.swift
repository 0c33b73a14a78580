import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// Watches see commits made by other processes (an app extension writing to a shared database): SQLite
/// reports none of them, so the database looks for them while a watch is active. A second `LocalDatabase`
/// on the same file is another process as far as SQLite is concerned (its own connections).
@Suite("Watches and other processes' commits", .cleansUp)
struct OtherProcessWatchTests {
    static let schema = Schema(tables: [Table(name: "notes", columns: [.text("body")])])

    /// The time limit only turns a watch that never delivers into a failure. Alone the test takes 0.3 s, but
    /// the check for other processes' commits runs in a task the database starts itself, and it and every
    /// resumed database call wait in the cooperative pool's shared queue, behind the whole run's jobs: in full
    /// runs on a loaded 2-core machine the test took 39–110 s, and a one-minute limit fired although it was
    /// progressing. (Threads of its own, as ManualClockTests have, would not cover the database's task.)
    @Test(
        "a row another process commits reaches this process's watch at the next check", .timeLimit(.minutes(10)))
    func otherProcessesCommitsAreSeen() async throws {
        let folder = try TemporaryDirectory()
        let clock = ManualClock()
        var configuration = LocalDatabase.Configuration()
        configuration.clock = clock
        let app = try LocalDatabase(
            path: folder.path("shared.sqlite"), schema: Self.schema, configuration: configuration)
        let shareExtension = try LocalDatabase(path: folder.path("shared.sqlite"), schema: Self.schema)
        let bodies = try app.watch(sql: "SELECT body FROM notes ORDER BY body") { try $0.getString(name: "body") }
        var iterator = bodies.makeAsyncIterator()
        #expect(try await iterator.next() == [])

        try await shareExtension.execute(sql: "INSERT INTO notes (id, body) VALUES ('1', 'from the extension')")
        try await app.execute(sql: "INSERT INTO notes (id, body) VALUES ('2', 'from the app')")
        // The app's own commit wakes its watch at once; the extension's row is read with it.
        let both = try await iterator.next()
        #expect(both == ["from the app", "from the extension"])

        // The check has taken its first reading (it sleeps after it); then the extension commits, and
        // nothing tells this process: the check does, when its interval has passed.
        await clock.waitForSleepers(count: 1)
        try await shareExtension.execute(sql: "INSERT INTO notes (id, body) VALUES ('3', 'later')")
        await clock.advance(by: .seconds(1))
        let later = try await iterator.next()
        #expect(later == ["from the app", "from the extension", "later"])
        try await app.close()
        try await shareExtension.close()
    }

    @Test("without a check interval, other processes' commits are not looked for")
    func checksCanBeTurnedOff() async throws {
        let folder = try TemporaryDirectory()
        var configuration = LocalDatabase.Configuration()
        configuration.otherProcessesCheckInterval = nil
        let clock = ManualClock()
        configuration.clock = clock
        let app = try LocalDatabase(
            path: folder.path("shared.sqlite"), schema: Self.schema, configuration: configuration)
        let bodies = try app.watch(sql: "SELECT body FROM notes") { try $0.getString(name: "body") }
        var iterator = bodies.makeAsyncIterator()
        #expect(try await iterator.next() == [])
        #expect(clock.sleeperCount == 0, "no check waits on the clock")
        try await app.close()
    }
}
