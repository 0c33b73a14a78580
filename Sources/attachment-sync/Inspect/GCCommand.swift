import ArgumentParser
import AttachmentSync
import Foundation

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

    func validate() throws {
        guard remoteOptions.remote != nil else { throw ValidationError("--remote is required.") }
        guard !databases.isEmpty else {
            throw ValidationError(
                "give at least one --db: every remote file would look unreferenced without one.")
        }
        _ = try Self.parseGrace(grace)
    }

    func run() async throws {
        let graceSeconds = try Self.parseGrace(grace)
        let remote = try OpenedRemote.open(remoteOptions, command: "gc")
        let plan: RemoteGarbageCollection
        var deleted = 0
        var keptAtApply: [RemoteFile] = []
        var opened: [LocalDatabase] = []
        do {
            for path in databases {
                opened.append(try LocalDatabase.readOnly(path: path))
            }
            plan = try await RemoteGarbageCollection.plan(
                remote: remote.storage, databases: opened, table: table, grace: .seconds(graceSeconds))
            for db in opened { try await db.close() }
            opened = []
            if apply {
                let counts = LockedValue((deleted: 0, kept: [RemoteFile]()))
                do {
                    try await plan.apply(to: remote.storage) { file, wasDeleted in
                        counts.withLock { if wasDeleted { $0.deleted += 1 } else { $0.kept.append(file) } }
                    }
                } catch {
                    deleted = counts.withLock { $0.deleted }
                    throw error
                }
                (deleted, keptAtApply) = counts.withLock { ($0.deleted, $0.kept) }
            }
        } catch {
            for db in opened { try? await db.close() }
            await remote.shutdown()
            FileHandle.standardError.write(
                Data(
                    ("attachment-sync gc: \(StatusCommand.describe(error))"
                        + (deleted > 0 ? " (after deleting \(deleted) files)" : "") + "\n").utf8))
            throw ExitCode(1)
        }
        await remote.shutdown()
        if json {
            print(try GCJSON(plan, remote: remote.description, applied: apply, keptAtApply: keptAtApply).encoded())
        } else {
            print(Self.text(plan, remote: remote.description, grace: grace, applied: apply, keptAtApply: keptAtApply))
        }
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

    static func text(
        _ plan: RemoteGarbageCollection, remote: String, grace: String, applied: Bool, keptAtApply: [RemoteFile] = []
    ) -> String {
        /// `1 file`, `2 files`.
        func files(_ count: Int) -> String { "\(count) file\(count == 1 ? "" : "s")" }
        var lines = [
            "listed \(files(plan.listedFiles)) in \(remote): "
                + "\(plan.referencedFiles) referenced, \(plan.candidates.count + plan.recent.count) unreferenced"
                + (plan.foreign.isEmpty ? "" : ", \(plan.foreign.count) foreign")
        ]
        /// A line per file of `list` (the first `limit`), then how many more there are.
        func append(_ list: [RemoteFile], atMost limit: Int = .max) {
            for file in list.prefix(limit) {
                lines.append("  \(file.storedName)  \(Self.describe(file, now: plan.now))")
            }
            if list.count > limit { lines.append("  … and \(list.count - limit) more") }
        }
        // With --apply, the candidates kept because they lost their stored hash are listed apart.
        let kept = Set(keptAtApply.map(\.storedName))
        let deleted = plan.candidates.filter { !kept.contains($0.storedName) }
        let bytes = DemoReport.bytes(deleted.reduce(Int64(0)) { $0.addingClamped(max(0, $1.size)) })
        if plan.candidates.isEmpty {
            lines.append("nothing to delete: no unreferenced file of this library's is older than \(grace)")
        } else {
            lines.append(
                (applied ? "deleted" : "would delete")
                    + " \(files(deleted.count)) (\(bytes)) last written more than \(grace) ago:")
            append(deleted)
        }
        if !keptAtApply.isEmpty {
            lines.append(
                "kept \(keptAtApply.count) of them: no longer carrying this library's stored SHA-256 when their "
                    + "turn came (another tool wrote under the name since the listing):")
            for file in keptAtApply { lines.append("  \(file.storedName)") }
        }
        if !plan.recent.isEmpty {
            lines.append(
                "kept \(plan.recent.count) unreferenced file\(plan.recent.count == 1 ? "" : "s") "
                    + "written within the last \(grace) (or of unknown age):")
            append(plan.recent, atMost: 20)
        }
        if !plan.foreign.isEmpty {
            lines.append(
                "kept \(files(plan.foreign.count)) this library did not write "
                    + "(no SHA-256 of its uploads stored with them), whatever their age:")
            append(plan.foreign, atMost: 50)
        }
        if !plan.leftovers.isEmpty {
            lines.append(
                (applied ? "deleted" : "would delete")
                    + " \(files(plan.leftovers.count)) (\(DemoReport.bytes(plan.leftoverBytes))) the remote kept for "
                    + "itself and no file needs (interrupted uploads, hashes of deleted files), older than \(grace):")
            append(plan.leftovers, atMost: 20)
        }
        if !applied, !plan.candidates.isEmpty || !plan.leftovers.isEmpty {
            lines.append("nothing was deleted: run again with --apply to delete")
        }
        return lines.joined(separator: "\n")
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

/// The `gc --json` document: add keys, never rename or remove one.
struct GCJSON: Encodable {
    struct File: Encodable {
        var name: String
        var filename: Nullable<String>
        var size: Int64
        var lastModified: Nullable<String>
    }

    var remote: String
    var applied: Bool
    var graceSeconds: Int64
    var listedFiles: Int
    var referencedFiles: Int
    var candidateBytes: Int64
    /// Deleted with --apply, else what would be.
    var candidates: [File]
    var recent: [File]
    /// Unreferenced files this library did not write (no stored SHA-256 of its uploads): never deleted.
    var foreign: [File]
    /// Candidates kept at --apply: they no longer carried the library's stored SHA-256 when their turn came.
    var keptAtApply: [File]
    /// The remote's own files no file needs, older than the grace period: deleted with --apply too.
    var leftovers: [File]
    var leftoverBytes: Int64

    init(_ plan: RemoteGarbageCollection, remote: String, applied: Bool, keptAtApply: [RemoteFile] = []) {
        self.remote = remote
        self.applied = applied
        graceSeconds = plan.grace.components.seconds
        listedFiles = plan.listedFiles
        referencedFiles = plan.referencedFiles
        candidateBytes = plan.candidateBytes
        let formatter = ISO8601DateFormatter()
        func file(_ file: RemoteFile) -> File {
            File(
                name: file.storedName, filename: Nullable(file.filename), size: file.size,
                lastModified: Nullable(file.lastModified.map { formatter.string(from: $0) }))
        }
        candidates = plan.candidates.map(file)
        recent = plan.recent.map(file)
        foreign = plan.foreign.map(file)
        self.keptAtApply = keptAtApply.map(file)
        leftovers = plan.leftovers.map(file)
        leftoverBytes = plan.leftoverBytes
    }

    func encoded() throws -> String {
        try jsonDocument(self)
    }
}
