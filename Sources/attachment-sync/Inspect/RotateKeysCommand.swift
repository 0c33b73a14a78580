import ArgumentParser
import AttachmentSync
import Crypto
import Foundation

/// `attachment-sync rotate-keys DB --remote REMOTE --keys KEYS --current-key ID`: every stored file of the
/// database's attachments re-encrypted under the current key (``KeyRotation``).
struct RotateKeysCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rotate-keys",
        abstract: "Re-encrypt an app's end-to-end encrypted remote files under the current key.",
        discussion: """
            Reads the attachments table of the SQLite database DB (read-only) and, for every attachment whose \
            file the remote REMOTE should hold, downloads the stored file, and when it is encrypted with a key \
            other than --current-key, decrypts it (every segment authenticated, and the content checked \
            against the record's SHA-256 when it has one) and encrypts it again under the current key, as it \
            streams: the content is never written to disk. The remote replaces its file only if it still \
            holds the one read (an S3 PutObject with If-Match, a rename in a folder), so devices always read \
            a whole file, old or new; devices need both keys until the rotation is done. A file that cannot \
            be rotated (a key missing from KEYS, a file that does not decrypt, one changed meanwhile) is \
            listed and left as it was.

            KEYS is a JSON file mapping key ids to base64-encoded 256-bit keys, {"2026-05": "…", \
            "2026-11": "…"}: the old keys and the current one. Keys are never printed. With --encrypt-plain, \
            files stored plain before the app turned encryption on are encrypted too (checked against the \
            record's SHA-256 when it has one); without it they are listed as failures.

            Safe to interrupt and run again: rotated files are under the current key and are left alone; with \
            --journal FILE the attachments done are noted there and not even downloaded again.

            \(RemoteOptions.syntax) An http(s):// remote cannot replace files and is refused.

            Exit status: 0 when every stored file is under the current key; 2 when some could not be rotated \
            or are not uploaded yet (listed: they may still be stored under an old key, so keep the old keys \
            and run again once they are uploaded); 1 when the database, the keys, the table or the remote could not be read, or the current \
            key is not in KEYS; 64 for bad arguments.
            """
    )

    @Argument(help: ArgumentHelp("The app's SQLite database file.", valueName: "db"))
    var database: String

    @OptionGroup var remoteOptions: RemoteOptions

    @Option(help: ArgumentHelp("A JSON file of key ids and base64 keys (old and current).", valueName: "file"))
    var keys: String

    @Option(help: ArgumentHelp("The id in KEYS of the key files are encrypted with from now on.", valueName: "id"))
    var currentKey: String

    @Option(help: "The attachments table's name.")
    var table = "attachments"

    @Option(help: ArgumentHelp("A file noting the attachments done, to skip them when run again.", valueName: "file"))
    var journal: String?

    @Flag(help: "Encrypt files stored plain before the app turned encryption on (instead of listing them).")
    var encryptPlain = false

    @Flag(help: "Print JSON (stable keys, for scripts) instead of lines for people.")
    var json = false

    func validate() throws {
        guard remoteOptions.remote != nil else { throw ValidationError("--remote is required.") }
    }

    func run() async throws {
        let provider: StaticKeyProvider
        do {
            provider = StaticKeyProvider(keys: try Self.readKeys(keys), current: currentKey)
        } catch {
            FileHandle.standardError.write(Data("attachment-sync rotate-keys: \(error)\n".utf8))
            throw ExitCode(1)
        }
        let opened = try OpenedRemote.open(remoteOptions, command: "rotate-keys")
        let remote = EncryptedRemoteStorage(
            wrapping: opened.storage, keys: provider, plaintextReads: encryptPlain ? .allowed { _ in true } : .refused)
        let interactive = isatty(STDERR_FILENO) == 1 && !json
        let report: KeyRotation.Report
        do {
            let db = try LocalDatabase.readOnly(path: database)
            do {
                report = try await KeyRotation.rotate(
                    db: db, remote: remote, table: table, journal: journal.map { URL(fileURLWithPath: $0) },
                    progress: interactive
                        ? { @Sendable done, total in
                            VerifyCommand.progressLine(done, total, "files", interactive: true).map(
                                VerifyCommand.writeProgress)
                        } : nil)
                try await db.close()
            } catch {
                try? await db.close()
                throw error
            }
        } catch {
            await opened.shutdown()
            if interactive { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
            FileHandle.standardError.write(
                Data("attachment-sync rotate-keys: \(StatusCommand.describe(error, database: database))\n".utf8))
            throw ExitCode(1)
        }
        await opened.shutdown()
        if interactive { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
        if json {
            print(try RotateKeysJSON(report, remote: opened.description).encoded())
        } else {
            print(Self.text(report, remote: opened.description))
        }
        if !report.isComplete { throw ExitCode(2) }
    }

    /// The keys of a KEYS file: a JSON object of key ids and base64-encoded 32-byte keys. Errors name the
    /// file and the key id, never a key.
    static func readKeys(_ path: String) throws -> [String: SymmetricKey] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ValidationError("cannot read the keys file \(String(reflecting: path))")
        }
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw ValidationError(
                "the keys file \(String(reflecting: path)) is not a JSON object of key ids and base64 keys")
        }
        var keys: [String: SymmetricKey] = [:]
        for (id, value) in object {
            guard let text = value as? String, let bytes = Data(base64Encoded: text), bytes.count == 32 else {
                throw ValidationError(
                    "key \(String(reflecting: id)) in \(String(reflecting: path)) is not a base64-encoded 256-bit key")
            }
            keys[id] = SymmetricKey(data: bytes)
        }
        return keys
    }

    static func text(_ report: KeyRotation.Report, remote: String) -> String {
        var lines = [
            "\(remote): \(report.rotated.count) re-encrypted under \(String(reflecting: report.keyId)), "
                + "\(report.upToDate) already under it, \(report.missing.count) not stored, "
                + "\(report.failed.count) left as they were"
        ]
        for failure in report.failed {
            lines.append("  \(failure.attachmentId): \(StatusTable.oneLine(failure.reason))")
        }
        if !report.missing.isEmpty {
            lines.append("not stored: " + report.missing.joined(separator: ", "))
        }
        if !report.pendingUploads.isEmpty {
            lines.append(
                "not uploaded yet (run again once they are; keep the old keys until then): "
                    + report.pendingUploads.joined(separator: ", "))
        }
        return lines.joined(separator: "\n")
    }
}

/// The JSON of `rotate-keys --json`.
struct RotateKeysJSON: Encodable {
    var remote: String
    var keyId: String
    var complete: Bool
    var rotated: [String]
    var upToDate: Int
    var missing: [String]
    var failed: [Failed]
    var pendingUploads: [String]

    struct Failed: Encodable {
        var attachmentId: String
        var code: String?
        var reason: String
    }

    init(_ report: KeyRotation.Report, remote: String) {
        self.remote = remote
        keyId = report.keyId
        complete = report.isComplete
        rotated = report.rotated
        upToDate = report.upToDate
        missing = report.missing
        failed = report.failed.map {
            Failed(attachmentId: $0.attachmentId, code: $0.code?.description, reason: $0.reason)
        }
        pendingUploads = report.pendingUploads
    }

    func encoded() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return String(decoding: try encoder.encode(self), as: UTF8.self)
    }
}
