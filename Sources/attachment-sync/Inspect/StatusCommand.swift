import ArgumentParser
import AttachmentSync
import Foundation

/// `attachment-sync status DB`: what an app's attachments table says, read without changing anything.
struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the attachments of an app's database by state, with retries, give-ups and the cache.",
        discussion: """
            Reads the attachments table of the SQLite database DB and prints: how many attachments are in \
            each state and their bytes; the content on this device, split into what a cache budget may \
            evict and what is kept (pinned, never uploaded, downloaded eagerly); the attachments that exist \
            only on this device; transfers waiting for a retry, with their attempts, next attempt and last \
            error; transfers given up; and the largest attachments.

            The database is opened read-only and read in one short transaction, so it is safe to run while \
            the app is running (in WAL mode the app's writes are not blocked). Nothing is written.

            Exit status: 0 when the table was read; 1 when the database or the table could not be read \
            (no such file, no such table, missing attachment columns); 64 for bad arguments.
            """
    )

    @Argument(help: ArgumentHelp("The app's SQLite database file.", valueName: "db"))
    var database: String

    @Option(help: "The attachments table's name.")
    var table = "attachments"

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "A cache budget to measure the local content against (the queue's maxCacheBytes): bytes, or a number "
                + "with K, M, G or T (multiples of 1024, as --bwlimit: 300000, 512K, 1.5G).",
            valueName: "size"))
    var budget: String?

    @Option(parsing: .unconditional, help: "How many of the largest attachments to list.")
    var largest = 10

    @Flag(help: "Print JSON (stable keys, for scripts) instead of a table.")
    var json = false

    func validate() throws {
        _ = try budgetBytes()
        guard largest >= 0 else { throw ValidationError("--largest must not be negative, not \(largest).") }
    }

    /// `--budget` in bytes, or `nil` without it.
    func budgetBytes() throws -> Int64? {
        guard let budget else { return nil }
        guard let bytes = ByteCount.parse(budget) else {
            throw ValidationError(
                "--budget must be a size, \(ByteCount.syntax), not \(String(reflecting: budget)).")
        }
        return bytes
    }

    func run() async throws {
        let report: AttachmentTableReport
        do {
            let db = try LocalDatabase.readOnly(path: database)
            do {
                report = try await AttachmentTableReport.read(
                    from: db, table: table, maxCacheBytes: try budgetBytes(), largest: largest)
                try await db.close()
            } catch {
                try? await db.close()
                throw error
            }
        } catch {
            FileHandle.standardError.write(
                Data("attachment-sync status: \(Self.describe(error, database: database))\n".utf8))
            throw ExitCode(1)
        }
        if json {
            print(try StatusJSON(report).encoded())
        } else {
            print(StatusTable(report: report, database: database).text)
        }
    }

    /// An error as one line for people (see ``ErrorText``); `database` is named when SQLite's message
    /// does not name it.
    static func describe(_ error: any Error, database: String? = nil) -> String {
        ErrorText.describe(error, database: database)
    }
}
