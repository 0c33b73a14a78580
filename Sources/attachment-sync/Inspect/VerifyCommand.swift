import ArgumentParser
import AttachmentSync
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `attachment-sync verify DB --dir ATTACHMENTS [--remote REMOTE] [--repair]`: every attachment's local file
/// (and remote file) against its record, and with `--repair` what can be fixed fixed through the queue.
struct VerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Check every attachment's files against its record; --repair fixes what can be fixed.",
        discussion: """
            Reads the attachments table of the SQLite database DB and checks the attachments directory \
            ATTACHMENTS against it: each file a record claims must be there, with the record's size and, \
            when the record knows it, its SHA-256 (the file is read in full). Files in the directory that no \
            record claims are listed too (the queue's own temporary files and subdirectories are not).

            With --remote, every attachment that was uploaded or downloaded is also checked against the \
            remote file: it must exist, with the record's size and, when the remote stored one, its SHA-256 \
            (nothing is downloaded). With --encrypted (an app that stores its files end-to-end encrypted), \
            a remote file must instead be as long as an encrypted file of the record's content, or be the \
            plain content (stored before encryption was turned on); no keys are needed, and whether the bytes \
            decrypt is checked by the app at every download. --repair is refused with --encrypted (without \
            the keys it cannot upload a file again), and a repair without it stops, changing nothing, when \
            the remote files turn out to be encrypted.

            With --remote and --state FILE, the remote check keeps how far it got and what it found in the \
            SQLite file FILE: a check that stops (a crash, a lost connection, Ctrl-C) is continued by the same \
            command, which asks the remote only about the records after the last page it finished (the local \
            files are checked again: that reads the disk, not the network). A finished check's state file \
            reports the same findings again without asking the remote; remove it to check anew. Progress goes \
            to standard error: on a terminal a line redrawn as it goes, otherwise a line every 10,000 records.

            Without --repair nothing is changed: the database is opened read-only, so it is safe to run while \
            the app runs. With --repair (which needs --remote) the tool runs the app's attachment queue once, \
            so the app must be stopped (the queue refuses to start while another process has one open on \
            ATTACHMENTS): a damaged or missing local file whose content the remote holds is fetched again and \
            checked; a file the remote lost or holds damaged is uploaded again from an intact local file; \
            leftover files the queue made are removed. It never deletes an only copy, a file it did not make, \
            or a remote file stored with another SHA-256 (another device's upload under the same name): \
            those are listed. Transfers the app had queued run too. Then everything is checked again.

            \(RemoteOptions.syntax)

            Exit status: 0 when every file agrees (after the repair, with --repair); 2 when something \
            disagrees (listed on standard output); 1 when the database, the table, the directory or the \
            remote could not be read, the remote location does not exist (no such folder or bucket, nothing \
            under the prefix), the queue could not start, or a fetch or upload of the repair failed; 64 for \
            bad arguments.
            """
    )

    @Argument(help: ArgumentHelp("The app's SQLite database file.", valueName: "db"))
    var database: String

    @Option(help: ArgumentHelp("The queue's attachments directory.", valueName: "attachments"))
    var dir: String

    @Option(help: "The attachments table's name.")
    var table = "attachments"

    @OptionGroup var remoteOptions: RemoteOptions

    @Flag(help: "Fix what can be fixed through the app's queue (needs --remote; stop the app first).")
    var repair = false

    @Flag(help: "The app encrypts its files end-to-end: check remote sizes as encrypted files' (no keys needed).")
    var encrypted = false

    @Flag(help: "Print JSON (stable keys, for scripts) instead of lines for people.")
    var json = false

    @Option(
        help: ArgumentHelp(
            "Keep the remote check in this SQLite file, and continue the one it holds (same remote, table and "
                + "--encrypted).", valueName: "file"))
    var state: String?

    func validate() throws {
        if repair, remoteOptions.remote == nil {
            throw ValidationError("--repair needs --remote: fixing files means fetching or uploading them.")
        }
        if state != nil, remoteOptions.remote == nil {
            throw ValidationError("--state needs --remote: it keeps the remote check.")
        }
        if state != nil, repair {
            throw ValidationError("--state does not apply to --repair, which checks everything again after it.")
        }
        if encrypted, remoteOptions.remote == nil {
            throw ValidationError("--encrypted needs --remote: it says how remote files are checked.")
        }
        if repair, encrypted {
            throw ValidationError(
                "--repair does not fix encrypted files (without the app's keys it cannot upload them again); "
                    + "check them with --encrypted.")
        }
    }

    func run() async throws {
        let remote = try remoteOptions.remote.map { _ in try OpenedRemote.open(remoteOptions, command: "verify") }
        let interactive = isatty(STDERR_FILENO) == 1 && !json
        var repaired: Repaired?
        let check: Check
        do {
            if repair, let remote {
                repaired = try await runRepair(remote)
            }
            // Before anything is judged missing (with --repair, runRepair checked before anything changed).
            if let remote { try await RemoteVerification.requireLocation(of: remote.storage) }
            check = try await Self.check(
                database: database, directory: dir, table: table, remote: remote, encrypted: encrypted,
                state: state.map { URL(fileURLWithPath: $0) }, remoteName: remoteOptions.remote,
                interactive: interactive)
        } catch {
            await remote?.shutdown()
            if interactive { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
            FileHandle.standardError.write(
                Data("attachment-sync verify: \(Self.describe(error, directory: dir, database: database))\n".utf8))
            throw ExitCode(1)
        }
        await remote?.shutdown()
        if interactive { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
        if json {
            print(try VerifyJSON(check.local, remote: check.remote, repaired: repaired).encoded())
        } else {
            var sections: [String] = []
            if let repaired { sections.append(Self.text(repaired)) }
            sections.append(Self.text(check.local, after: repaired != nil))
            if let remoteCheck = check.remote { sections.append(Self.text(remoteCheck, after: repaired != nil)) }
            print(sections.joined(separator: "\n"))
        }
        if let repaired, !repaired.failures.isEmpty { throw ExitCode(1) }
        if !check.isClean { throw ExitCode(2) }
    }

    /// The local files (and the remote files, with a remote) checked, read-only.
    struct Check {
        var local: LocalFileVerification
        var remote: RemoteVerification?
        var isClean: Bool { local.isClean && (remote?.isClean ?? true) }
    }

    static func check(
        database: String, directory: String, table: String, remote: OpenedRemote?, encrypted: Bool = false,
        state: URL? = nil, remoteName: String? = nil, interactive: Bool
    ) async throws -> Check {
        typealias Progress = @Sendable (Int, Int) -> Void
        var localProgress: Progress?
        var remoteProgress: Progress?
        // On a terminal a line redrawn as it goes; otherwise (a log, a pipe) a line every 10,000, so a long
        // check of a large bucket shows it is moving.
        localProgress = { @Sendable checked, total in
            progressLine(checked, total, "files", interactive: interactive).map(writeProgress)
        }
        remoteProgress = { @Sendable checked, total in
            progressLine(checked, total, "remote files", interactive: interactive).map(writeProgress)
        }
        let db = try LocalDatabase.readOnly(path: database)
        do {
            let local = try await LocalFileVerification.verify(
                db: db, attachmentsDirectory: directory, table: table, progress: localProgress)
            var remoteCheck: RemoteVerification?
            if let remote {
                remoteCheck = try await RemoteVerification.verify(
                    db: db, remote: remote.storage, table: table, encrypted: encrypted, stateFile: state,
                    remoteName: remoteName, progress: remoteProgress)
            }
            try await db.close()
            return Check(local: local, remote: remoteCheck)
        } catch {
            try? await db.close()
            throw error
        }
    }

    /// What `--repair` did.
    struct Repaired {
        var local: LocalFileRepair
        var remote: RemoteFileRepair
        /// The fetches and uploads the repair queued that did not succeed in its pass, by attachment id,
        /// with the last error (the records stay queued: the app's queue tries again).
        var failures: [String: String] = [:]
        /// The attachments fetched again that have their content back.
        var fetched: [String] = []
        /// The attachments uploaded again that the remote holds now.
        var uploaded: [String] = []
    }

    /// Runs the app's queue on the database once: its startup, both repairs, and one pass of transfers.
    func runRepair(_ remote: OpenedRemote) async throws -> Repaired {
        let db = try LocalDatabase.existing(path: database)
        var configuration = AttachmentQueue.Configuration(attachmentsDirectory: dir)
        configuration.attachmentsQueueTableName = table
        configuration.syncInterval = .zero
        // One run that should leave everything checked: the whole startup check first.
        configuration.startupFileCheck = .beforeReady
        let queue = AttachmentQueue(db: db, remoteStorage: remote.storage, configuration: configuration)
        do {
            // Before anything changes: a mistyped location must not make every file look lost.
            try await RemoteVerification.requireLocation(of: remote.storage)
            let local = try await queue.repairLocalFiles()
            let remoteRepair = try await queue.repairRemoteFiles()
            try await queue.syncNow()
            var repaired = Repaired(local: local, remote: remoteRepair)
            // What happened, not what was meant: each fetch and upload is judged by its record now.
            let status = await queue.status.first { _ in true }
            var errors: [String: String] = [:]
            for retry in status?.waitingForRetry ?? [] { errors[retry.attachmentId] = retry.lastError }
            for entry in status?.givenUp ?? [] { errors[entry.attachmentId] = entry.lastError }
            for id in local.refetched {
                let attachment = try await queue.attachment(id: id)
                if attachment?.state == .queuedDownload {
                    repaired.failures[id] = errors[id] ?? "not fetched in this run"
                } else {
                    repaired.fetched.append(id)
                }
            }
            for id in remoteRepair.reuploading {
                let attachment = try await queue.attachment(id: id)
                if attachment?.state == .synced, attachment?.hasSynced == true {
                    repaired.uploaded.append(id)
                } else {
                    repaired.failures[id] = errors[id] ?? "not uploaded in this run"
                }
            }
            await queue.close()
            try await db.close()
            return repaired
        } catch {
            await queue.close()
            try? await db.close()
            throw error
        }
    }

    /// The progress to write on standard error after `checked` of `total` items, if any: on a terminal a line
    /// redrawn every 100 items and at the end; otherwise a line of its own every 10,000 items (none for a
    /// small check, whose report follows at once).
    static func progressLine(_ checked: Int, _ total: Int, _ what: String, interactive: Bool) -> String? {
        if interactive {
            guard checked % 100 == 0 || checked == total else { return nil }
            return "\rchecked \(checked) of \(total) \(what)"
        }
        guard checked > 0, checked % 10_000 == 0 else { return nil }
        return "attachment-sync verify: checked \(checked) of \(total) \(what)\n"
    }

    @Sendable static func writeProgress(_ line: String) {
        FileHandle.standardError.write(Data(line.utf8))
    }

    static func describe(_ error: any Error, directory: String, database: String? = nil) -> String {
        if let error = error as? AttachmentError, error.code == .directoryInUse {
            return "the app (or another process) is syncing the attachments of \(directory) (it holds the transfer "
                + "lease): stop it, then run verify --repair again; nothing was changed"
        }
        return StatusCommand.describe(error, database: database)
    }

    static func text(_ repaired: Repaired) -> String {
        func list(_ ids: [String]) -> String {
            ids.prefix(10).joined(separator: ", ") + (ids.count > 10 ? " and \(ids.count - 10) more" : "")
        }
        var lines: [String] = []
        if !repaired.fetched.isEmpty {
            lines.append(
                "repaired: fetched \(repaired.fetched.count) damaged or missing local file(s) again: "
                    + list(repaired.fetched.sorted()))
        }
        if !repaired.uploaded.isEmpty {
            lines.append(
                "repaired: uploaded \(repaired.uploaded.count) file(s) remote storage had lost or damaged: "
                    + list(repaired.uploaded.sorted()))
        }
        for (id, aside) in repaired.local.movedAside.sorted(by: { $0.key < $1.key }) {
            lines.append(
                "  set aside: the damaged file of \(id) is kept at \(aside) (remote storage cannot confirm it holds "
                    + "the content); delete it once the fetched copy is checked")
        }
        if !repaired.failures.isEmpty {
            lines.append(
                "repair failed for \(repaired.failures.count) file(s); their records stay queued and the app's queue "
                    + "will try again:")
            for (id, error) in repaired.failures.sorted(by: { $0.key < $1.key }) {
                lines.append("  failed: \(id): \(error)")
            }
        }
        if lines.isEmpty { lines.append("repaired: nothing needed fixing that could be fixed") }
        for finding in repaired.local.leftAlone {
            guard let id = finding.attachmentId, let reason = repaired.local.reasons[finding.file] else { continue }
            lines.append("  left alone: \(finding.file) (attachment \(id)): \(reason)")
        }
        for finding in repaired.remote.leftAlone {
            let reason =
                if let other = finding.remoteSHA256, other != finding.recordSHA256 {
                    "another upload (SHA-256 \(other)) is stored under its name; kept, not replaced"
                } else if finding.problem != .missing, finding.remoteSHA256 == nil {
                    "the remote file has no stored SHA-256, so it may be another upload; kept, not replaced"
                } else if finding.state != .synced {
                    "it is \(StatusTable.name(finding.state)), not synced"
                } else if !finding.hasLocalFile {
                    "no local copy here to upload again; another device may have one"
                } else {
                    "its local file is not intact (see below), so it was not uploaded"
                }
            lines.append("  left alone: \(finding.filename) (attachment \(finding.attachmentId)): \(reason)")
        }
        return lines.joined(separator: "\n")
    }

    static func text(_ verification: LocalFileVerification, after repair: Bool = false) -> String {
        var lines = [
            (repair ? "after the repair, checked " : "checked ")
                + "\(verification.checkedFiles) file\(verification.checkedFiles == 1 ? "" : "s") "
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

    static func text(_ verification: RemoteVerification, after repair: Bool = false) -> String {
        var lines = [
            (repair ? "after the repair, checked " : "checked ")
                + "\(verification.checkedFiles) remote file\(verification.checkedFiles == 1 ? "" : "s"): "
                + (verification.isClean
                    ? "all agree with their records"
                    : "\(verification.findings.count) disagree\(verification.findings.count == 1 ? "s" : "")")
        ]
        for finding in verification.findings {
            lines.append(
                "  remote \(finding.filename): \(finding.problem), attachment \(finding.attachmentId) "
                    + "(\(StatusTable.name(finding.state)))"
                    + (finding.hasLocalFile ? "; this device has a local file" : "; no local file here"))
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

    struct RemoteFinding: Encodable {
        var filename: String
        var attachmentId: String
        var state: String
        var problem: String
        var expected: Nullable<String>
        var actual: Nullable<String>
        var hasLocalFile: Bool
        var remoteSHA256: Nullable<String>
    }

    struct Remote: Encodable {
        var checkedFiles: Int
        var clean: Bool
        var findings: [RemoteFinding]
    }

    struct Repair: Encodable {
        /// Fetched again, with their content back.
        var refetched: [String]
        /// Uploaded again: the remote holds them now.
        var reuploaded: [String]
        /// Queued by the repair but not done in its run, by id, with the last error.
        var failed: [String: String]
        /// Damaged files kept aside (nothing confirmed the remote holds them), by id: where they are.
        var movedAside: [String: String]
        var leftAlone: [String]
    }

    var checkedFiles: Int
    var bytesHashed: Int64
    /// Local and (with --remote) remote files all agree.
    var clean: Bool
    var findings: [Finding]
    /// `null` without --remote.
    var remote: Nullable<Remote>
    /// `null` without --repair; the other keys describe the files after it.
    var repair: Nullable<Repair>

    init(
        _ verification: LocalFileVerification, remote: RemoteVerification? = nil,
        repaired: VerifyCommand.Repaired? = nil
    ) {
        checkedFiles = verification.checkedFiles
        bytesHashed = verification.bytesHashed
        clean = verification.isClean && (remote?.isClean ?? true)
        findings = verification.findings.map { finding in
            let (problem, expected, actual): (String, String?, String?) =
                switch finding.problem {
                case .missing: ("missing", nil, nil)
                case .unclaimed: ("unclaimed", nil, nil)
                case .unreadable(let reason): ("unreadable", nil, reason)
                case .wrongSize(let expected, let actual): ("wrongSize", "\(expected)", "\(actual)")
                case .wrongHash(let expected, let actual): ("wrongHash", expected, actual)
                }
            return Finding(
                file: finding.file, attachmentId: Nullable(finding.attachmentId),
                state: Nullable(finding.state?.description), problem: problem, expected: Nullable(expected),
                actual: Nullable(actual), remoteHasContent: finding.remoteHasContent)
        }
        self.remote = Nullable(
            remote.map { remote in
                Remote(
                    checkedFiles: remote.checkedFiles, clean: remote.isClean,
                    findings: remote.findings.map { finding in
                        let (problem, expected, actual): (String, String?, String?) =
                            switch finding.problem {
                            case .missing: ("missing", nil, nil)
                            case .wrongSize(let expected, let actual): ("wrongSize", "\(expected)", "\(actual)")
                            case .wrongHash(let expected, let actual): ("wrongHash", expected, actual)
                            case .wrongEncryptedSize(let contentSize, let actual):
                                ("wrongEncryptedSize", "\(contentSize)", "\(actual)")
                            }
                        return RemoteFinding(
                            filename: finding.filename, attachmentId: finding.attachmentId,
                            state: finding.state.description, problem: problem, expected: Nullable(expected),
                            actual: Nullable(actual), hasLocalFile: finding.hasLocalFile,
                            remoteSHA256: Nullable(finding.remoteSHA256))
                    })
            })
        repair = Nullable(
            repaired.map { repaired in
                Repair(
                    refetched: repaired.fetched.sorted(), reuploaded: repaired.uploaded.sorted(),
                    failed: repaired.failures, movedAside: repaired.local.movedAside,
                    leftAlone: (repaired.local.leftAlone.compactMap(\.attachmentId)
                        + repaired.remote.leftAlone.map(\.attachmentId)).sorted())
            })
    }

    func encoded() throws -> String {
        try jsonDocument(self)
    }
}
