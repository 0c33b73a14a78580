import ArgumentParser
import AttachmentSync
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `attachment-sync verify DB --dir ATTACHMENTS`: every attachment's local file against its record.
struct VerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Check every attachment's local file against its record, and find files no record claims.",
        discussion: """
            Reads the attachments table of the SQLite database DB and checks the attachments directory \
            ATTACHMENTS against it: each file a record claims must be there, with the record's size and, \
            when the record knows it, its SHA-256 (the file is read in full). Files in the directory that no \
            record claims are listed too (the queue's own temporary files and subdirectories are not).

            Each finding says whether the remote holds the content (it can be fetched again) or the file was \
            the only copy. Nothing is changed: the database is opened read-only, so it is safe to run while \
            the app runs. The queue repairs what it can when it next starts (a synced file that is missing is \
            downloaded again; an orphan it made is removed).

            Exit status: 0 when every file agrees; 2 when something disagrees (listed on standard output); \
            1 when the database, the table or the directory could not be read; 64 for bad arguments.
            """
    )

    @Argument(help: ArgumentHelp("The app's SQLite database file.", valueName: "db"))
    var database: String

    @Option(help: ArgumentHelp("The queue's attachments directory.", valueName: "attachments"))
    var dir: String

    @Option(help: "The attachments table's name.")
    var table = "attachments"

    @Flag(help: "Print JSON (stable keys, for scripts) instead of lines for people.")
    var json = false

    func run() async throws {
        let verification: LocalFileVerification
        let interactive = isatty(STDERR_FILENO) == 1 && !json
        do {
            let db = try LocalDatabase.readOnly(path: database)
            do {
                verification = try await LocalFileVerification.verify(
                    db: db, attachmentsDirectory: dir, table: table,
                    progress: interactive ? Self.showProgress : nil)
                try await db.close()
            } catch {
                try? await db.close()
                throw error
            }
        } catch {
            if interactive { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
            FileHandle.standardError.write(Data("attachment-sync verify: \(StatusCommand.describe(error))\n".utf8))
            throw ExitCode(1)
        }
        if interactive { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
        if json {
            print(try VerifyJSON(verification).encoded())
        } else {
            print(Self.text(verification))
        }
        if !verification.isClean { throw ExitCode(2) }
    }

    /// A progress line on standard error, redrawn every 100 files and at the end.
    @Sendable static func showProgress(_ checked: Int, _ total: Int) {
        guard checked % 100 == 0 || checked == total else { return }
        FileHandle.standardError.write(Data("\rchecked \(checked) of \(total) files".utf8))
    }

    static func text(_ verification: LocalFileVerification) -> String {
        var lines = [
            "checked \(verification.checkedFiles) file\(verification.checkedFiles == 1 ? "" : "s") "
                + "(\(DemoReport.bytes(Int(verification.bytesHashed))) hashed): "
                + (verification.isClean
                    ? "all agree with their records"
                    : "\(verification.findings.count) disagree\(verification.findings.count == 1 ? "s" : "")")
        ]
        for finding in verification.findings {
            let owner = finding.attachmentId.map { "attachment \($0) (\(StatusTable.name(finding.state ?? .synced)))" }
            var line = "  \(finding.file): \(finding.problem)"
            if let owner { line += ", \(owner)" }
            if finding.attachmentId != nil {
                line += finding.remoteHasContent ? "; remote storage has it" : "; this was the only copy"
            }
            lines.append(line)
        }
        return lines.joined(separator: "\n")
    }
}

/// The `verify --json` document: add keys, never rename or remove one.
struct VerifyJSON: Encodable {
    struct Finding: Encodable {
        var file: String
        var attachmentId: Nullable<String>
        var state: Nullable<String>
        var problem: String
        var expected: Nullable<String>
        var actual: Nullable<String>
        var remoteHasContent: Bool
    }

    var checkedFiles: Int
    var bytesHashed: Int64
    var clean: Bool
    var findings: [Finding]

    init(_ verification: LocalFileVerification) {
        checkedFiles = verification.checkedFiles
        bytesHashed = verification.bytesHashed
        clean = verification.isClean
        findings = verification.findings.map { finding in
            let (problem, expected, actual): (String, String?, String?) =
                switch finding.problem {
                case .missing: ("missing", nil, nil)
                case .unclaimed: ("unclaimed", nil, nil)
                case .wrongSize(let expected, let actual): ("wrongSize", "\(expected)", "\(actual)")
                case .wrongHash(let expected, let actual): ("wrongHash", expected, actual)
                }
            return Finding(
                file: finding.file, attachmentId: Nullable(finding.attachmentId),
                state: Nullable(finding.state?.description), problem: problem, expected: Nullable(expected),
                actual: Nullable(actual), remoteHasContent: finding.remoteHasContent)
        }
    }

    func encoded() throws -> String {
        try jsonDocument(self)
    }
}
