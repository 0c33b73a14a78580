import ArgumentParser
import AttachmentSync
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `attachment-sync gc --remote REMOTE --db DB …`: remote files no database refers to, listed, and deleted
/// only with `--apply` and only once older than the grace period.
struct GCCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gc",
        abstract: "Find remote files that no database refers to, and delete them with --apply.",
        discussion: """
            Lists the remote storage REMOTE, then reads the attachments table of every database given with \
            --db. A remote file that no record of any of them names (in any state, archived ones included) is \
            unreferenced; it is deleted only when it was last written longer ago than the grace period (a \
            file whose age the remote does not say is kept). Without --apply nothing is deleted: the files \
            that would be are printed with their bytes. Files the remote adapter kept for itself that no \
            file needs any more (a folder remote's temporary files of interrupted uploads, stored hashes of \
            deleted files) are collected the same way, once older than the grace period.

            Only files this library wrote are ever deleted: those that carry the SHA-256 its uploads store \
            (beside the file in a folder or WebDAV remote, as x-amz-meta-sha256 on an S3 object), checked \
            again just before each delete. Anything else in the folder or under the prefix (a backup, a \
            readme.txt, .DS_Store, a file an old version uploaded before it stored hashes) is listed as \
            foreign and kept, whatever its age.

            The caveat: each device's attachments table knows the attachments that device has seen. A file \
            uploaded by a device whose rows have not reached these databases yet looks unreferenced. Give the \
            database of every device that may still need a file (or one that sees every row), and a grace \
            period longer than any device stays offline with unsynced rows. A file deleted too early is lost \
            for every device that had not downloaded it.

            Memory does not grow with the bucket: the references and the unreferenced files are kept in an \
            SQLite state file, and the listing is read a page at a time. With --state FILE the state file is \
            kept: a run that stops (a crash, a lost connection, Ctrl-C) is continued by the same command, \
            which lists on after the last recorded page or deletes the candidates not yet deleted (reading \
            the databases again first). A dry run's state file can be applied later with --apply: it deletes \
            what the dry run found, minus whatever a record refers to by then. Progress goes to standard \
            error.

            \(RemoteOptions.syntax)

            Exit status: 0 when the remote was listed and the databases read (and, with --apply, every \
            candidate deleted); 1 when a database, the table or the remote could not be read, or a delete \
            failed (the files listed before it are deleted); 64 for bad arguments.
            """
    )

    @OptionGroup var remoteOptions: RemoteOptions

    @Option(
        name: .customLong("db"),
        help: ArgumentHelp("A database whose records keep their files (repeat for each device).", valueName: "db"))
    var databases: [String] = []

    @Option(help: "The attachments table's name in each database.")
    var table = "attachments"

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "How old an unreferenced file must be to be deleted: a number and s, m, h or d (7d, 36h, 0s).",
            valueName: "age"))
    var grace = "7d"

    @Flag(help: "Delete the files (without it, only print what would be deleted).")
    var apply = false

    @Flag(help: "Print JSON (stable keys, for scripts) instead of lines for people.")
    var json = false

    @Option(
        help: ArgumentHelp(
            "Keep the collection in this SQLite file, and continue the one it holds (same remote, databases, "
                + "table and grace).", valueName: "file"))
    var state: String?

    func validate() throws {
        guard remoteOptions.remote != nil else { throw ValidationError("--remote is required.") }
        guard !databases.isEmpty else {
            throw ValidationError(
                "give at least one --db: every remote file would look unreferenced without one.")
        }
        _ = try Self.parseGrace(grace)
    }

    func run() async throws {
        let remote = try OpenedRemote.open(remoteOptions, command: "gc")
        try await collect(remote.storage, opened: remote)
    }

    /// Runs the collection on `storage` (the opened remote's adapter, as its own type) and prints it.
    func collect<Remote: ListableRemoteStorage>(_ storage: Remote, opened remote: OpenedRemote) async throws {
        let graceSeconds = try Self.parseGrace(grace)
        var opened: [LocalDatabase] = []
        var collector: RemoteGarbageCollector<Remote>?
        let progress = GCProgress(interactive: isatty(STDERR_FILENO) == 1)
        let summary: RemoteGarbageCollection.Summary
        do {
            for path in databases {
                opened.append(try LocalDatabase.readOnly(path: path))
            }
            let running = try RemoteGarbageCollector(
                remote: storage, databases: opened, table: table,
                grace: .seconds(graceSeconds), stateFile: state.map { URL(fileURLWithPath: $0) },
                remoteName: remote.description)
            collector = running
            summary =
                try await apply ? running.apply(progress: progress.report) : running.plan(progress: progress.report)
            progress.clear()
            for db in opened { try await db.close() }
            opened = []
            if json {
                try await GCJSON.write(running, summary, remote: remote.description, applied: apply)
            } else {
                try await Self.printText(running, summary, remote: remote.description, grace: grace, applied: apply)
            }
            try running.finish()
        } catch {
            progress.clear()
            let deleted = (try? await collector?.summary().deletedFiles) ?? 0
            try? collector?.finish()
            for db in opened { try? await db.close() }
            await remote.shutdown()
            FileHandle.standardError.write(
                Data(
                    ("attachment-sync gc: \(StatusCommand.describe(error))"
                        + (deleted > 0 ? " (\(deleted) files deleted so far)" : "")
                        // Only once the state file holds a collection: a refused one is not continued.
                        + (collector == nil
                            ? "" : state.map { "; run the same command again to continue from \($0)" } ?? "")
                        + "\n").utf8))
            throw ExitCode(1)
        }
        await remote.shutdown()
    }

    /// `7d`, `36h`, `90m`, `0s` as seconds.
    static func parseGrace(_ text: String) throws -> Int64 {
        let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3_600, "d": 86_400]
        guard let unit = text.last.flatMap({ units[$0] }), let value = Int64(text.dropLast()), value >= 0,
            value <= Int64.max / unit
        else {
            throw ValidationError(
                "--grace must be a whole number and a unit (s, m, h or d), like 7d or 36h, not \(String(reflecting: text))."
            )
        }
        return value * unit
    }

    /// Prints the report for people, reading the files from the collection's state a page at a time.
    static func printText<Remote>(
        _ collector: RemoteGarbageCollector<Remote>, _ summary: RemoteGarbageCollection.Summary,
        remote: String, grace: String, applied: Bool
    ) async throws {
        /// `1 file`, `2 files`.
        func files(_ count: Int) -> String { "\(count) file\(count == 1 ? "" : "s")" }
        print(
            "listed \(files(summary.listedFiles)) in \(remote): "
                + "\(summary.referencedFiles) referenced, \(summary.candidates + summary.recent) unreferenced"
                + (summary.foreign == 0 ? "" : ", \(summary.foreign) foreign"))
        /// A line per file of `kind` that `include` takes (the first `limit`), then how many more there are.
        func list(
            _ kind: RemoteGarbageCollection.FileKind, atMost limit: Int = .max,
            including include: (RemoteGarbageCollection.Entry) -> Bool = { _ in true }
        ) async throws {
            var (printed, more) = (0, 0)
            try await collector.forEachFile(kind) { entry in
                guard include(entry) else { return }
                if printed < limit {
                    print("  \(entry.file.storedName)  \(Self.describe(entry.file, now: collector.now))")
                    printed += 1
                } else {
                    more += 1
                }
            }
            if more > 0 { print("  … and \(more) more") }
        }
        // With --apply, the candidates kept because they lost their stored hash are listed apart.
        let deletedCount = summary.candidates - summary.keptAtApply
        if summary.candidates == 0 {
            print("nothing to delete: no unreferenced file of this library's is older than \(grace)")
        } else {
            let bytes = try await candidateBytes(collector, summary)
            print(
                (applied ? "deleted" : "would delete")
                    + " \(files(deletedCount)) (\(DemoReport.bytes(bytes))) last written more than \(grace) ago:")
            try await list(.candidate) { $0.deleted != false }
        }
        if summary.keptAtApply > 0 {
            print(
                "kept \(summary.keptAtApply) of them: no longer carrying this library's stored SHA-256 when their "
                    + "turn came (another tool wrote under the name since the listing):")
            try await list(.candidate) { $0.deleted == false }
        }
        if summary.recent > 0 {
            print(
                "kept \(summary.recent) unreferenced file\(summary.recent == 1 ? "" : "s") "
                    + "written within the last \(grace) (or of unknown age):")
            try await list(.recent, atMost: 20)
        }
        if summary.foreign > 0 {
            print(
                "kept \(files(summary.foreign)) this library did not write "
                    + "(no SHA-256 of its uploads stored with them), whatever their age:")
            try await list(.foreign, atMost: 50)
        }
        if summary.leftovers > 0 {
            print(
                (applied ? "deleted" : "would delete")
                    + " \(files(summary.leftovers)) (\(DemoReport.bytes(summary.leftoverBytes))) the remote kept for "
                    + "itself and no file needs (interrupted uploads, hashes of deleted files), older than \(grace):")
            try await list(.leftover, atMost: 20)
        }
        if !applied, summary.candidates > 0 || summary.leftovers > 0 {
            print("nothing was deleted: run again with --apply to delete")
        }
    }

    /// The bytes of the candidates deleted (or to be), without those kept at apply.
    static func candidateBytes<Remote>(
        _ collector: RemoteGarbageCollector<Remote>, _ summary: RemoteGarbageCollection.Summary
    ) async throws -> Int64 {
        guard summary.keptAtApply > 0 else { return summary.candidateBytes }
        var bytes: Int64 = 0
        try await collector.forEachFile(.candidate) { entry in
            if entry.deleted != false { bytes = bytes.addingClamped(max(0, entry.file.size)) }
        }
        return bytes
    }

    static func describe(_ file: RemoteFile, now: Date) -> String {
        let size = DemoReport.bytes(file.size)
        guard let modified = file.lastModified else { return "\(size), age unknown" }
        return "\(size), written \(age(now.timeIntervalSince(modified))) ago"
    }

    /// A duration in its largest whole unit: `40 s`, `12 min`, `5 h`, `3 d`.
    static func age(_ seconds: TimeInterval) -> String {
        let whole: Int64 = seconds.isNaN || seconds <= 0 ? 0 : seconds >= 9e18 ? Int64.max : Int64(seconds)
        switch whole {
        case ..<120: return "\(whole) s"
        case ..<7_200: return "\(whole / 60) min"
        case ..<172_800: return "\(whole / 3_600) h"
        default: return "\(whole / 86_400) d"
        }
    }
}

/// The `gc --json` document: add keys, never rename or remove one. It is written as the files are read
/// from the collection's state, one file per line, so a bucket of millions prints in constant memory.
///
/// Keys (in this order): `applied`, `candidateBytes`, `candidates` (deleted with --apply, else what would
/// be; kept-at-apply ones included), `foreign` (unreferenced files this library did not write: never
/// deleted), `graceSeconds`, `keptAtApply` (candidates that no longer carried the library's stored SHA-256
/// when their turn came), `leftoverBytes`, `leftovers` (the remote's own files no file needs, older than the
/// grace period: deleted with --apply too), `listedFiles`, `recent`, `referencedFiles`, `remote`. Each file
/// is an object with `filename` (or null), `lastModified` (ISO 8601, or null), `name` and `size`.
enum GCJSON {
    struct File: Encodable {
        var name: String
        var filename: Nullable<String>
        var size: Int64
        var lastModified: Nullable<String>
    }

    static func write<Remote>(
        _ collector: RemoteGarbageCollector<Remote>, _ summary: RemoteGarbageCollection.Summary,
        remote: String, applied: Bool
    ) async throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let formatter = ISO8601DateFormatter()
        func json(_ value: some Encodable) throws -> String {
            String(decoding: try encoder.encode(value), as: UTF8.self)
        }
        func scalar(_ key: String, _ value: some Encodable) throws {
            print("  \(try json(key)) : \(try json(value)),")
        }
        func array(
            _ key: String, _ kind: RemoteGarbageCollection.FileKind,
            including include: (RemoteGarbageCollection.Entry) -> Bool = { _ in true }
        ) async throws {
            print("  \(try json(key)) : [", terminator: "")
            var first = true
            try await collector.forEachFile(kind) { entry in
                guard include(entry) else { return }
                let file = File(
                    name: entry.file.storedName, filename: Nullable(entry.file.filename), size: entry.file.size,
                    lastModified: Nullable(entry.file.lastModified.map { formatter.string(from: $0) }))
                print((first ? "\n    " : ",\n    ") + (try json(file)), terminator: "")
                first = false
            }
            print(first ? "]," : "\n  ],")
        }
        print("{")
        try scalar("applied", applied)
        try scalar("candidateBytes", summary.candidateBytes)
        try await array("candidates", .candidate)
        try await array("foreign", .foreign)
        try scalar("graceSeconds", collector.grace.components.seconds)
        try await array("keptAtApply", .candidate) { $0.deleted == false }
        try scalar("leftoverBytes", summary.leftoverBytes)
        try await array("leftovers", .leftover)
        try scalar("listedFiles", summary.listedFiles)
        try await array("recent", .recent)
        try scalar("referencedFiles", summary.referencedFiles)
        print("  \(try json("remote")) : \(try json(remote))")
        print("}")
    }
}

/// `gc`'s progress on standard error: on a terminal one line rewritten as it goes (cleared before the
/// report), elsewhere a line when a phase starts and every 100,000 files listed or 10,000 deleted.
final class GCProgress: Sendable {
    let interactive: Bool
    private let shown = LockedValue<(phase: RemoteGarbageCollection.Progress.Phase?, line: Bool)>((nil, false))

    init(interactive: Bool) {
        self.interactive = interactive
    }

    /// What the collector calls.
    var report: @Sendable (RemoteGarbageCollection.Progress) -> Void {
        { [self] progress in show(progress) }
    }

    func show(_ progress: RemoteGarbageCollection.Progress) {
        let text: String
        switch progress.phase {
        case .readingReferences: text = "reading the databases: \(progress.recordsRead) records"
        case .listing:
            text = "listing: \(progress.listedFiles) files, \(progress.unreferencedFiles) unreferenced"
        case .deleting: text = "deleting: \(progress.deletedFiles) files deleted"
        }
        let write = shown.withLock { shown -> Bool in
            defer { shown.phase = progress.phase }
            if interactive { return true }
            switch progress.phase {
            case _ where shown.phase != progress.phase: return true
            case .listing: return progress.listedFiles % 100_000 < 1_000
            case .deleting: return progress.deletedFiles % 10_000 < 256
            case .readingReferences: return false
            }
        }
        guard write else { return }
        if interactive {
            shown.withLock { $0.line = true }
            FileHandle.standardError.write(Data(("\r\u{1B}[K" + text).utf8))
        } else {
            FileHandle.standardError.write(Data(("attachment-sync gc: " + text + "\n").utf8))
        }
    }

    /// Clears the rewritten line on a terminal.
    func clear() {
        guard interactive, shown.withLock({ $0.line }) else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[K".utf8))
    }
}
