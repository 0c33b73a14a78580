import AttachmentSync
import AttachmentSyncTesting
import Crypto
import Foundation

/// Where a scenario's uploads went, to read them back.
enum RemoteCopies: Sendable {
    /// An ``InMemoryRemoteStorage``.
    case memory(InMemoryRemoteStorage)
    /// A ``FileSystemRemoteStorage`` folder.
    case folder(URL)

    /// Every stored file's bytes, by filename.
    func allFiles() async throws -> [String: Data] {
        switch self {
        case .memory(let storage):
            return await storage.files
        case .folder(let folder):
            var result: [String: Data] = [:]
            for name in try FileManager.default.contentsOfDirectory(atPath: folder.path) {
                result[name] = FileManager.default.contents(atPath: folder.appendingPathComponent(name).path)
            }
            return result
        }
    }
}

/// A row of the attachments table, as the checks read it.
private struct StoredRecord: Sendable {
    /// The attachment's id.
    var id: String
    /// Its name in the remote.
    var filename: String
    /// Its state's raw value.
    var state: Int
    /// Whether it ever reached the remote.
    var hasSynced: Bool
    /// Its size in bytes, when known.
    var size: Int64?
    /// Its local file, relative to the attachments folder.
    var localUri: String?
    /// Failed tries of its pending transfer.
    var attempts: Int
    /// The last failure's text.
    var lastError: String?
}

/// Checks that the table holds exactly the `expected` attachments (by id), each `synced` with
/// `has_synced` set and the right size, and that its local file and its remote copy both have exactly the
/// expected bytes, and that the remote holds nothing else. Throws a ``BenchmarkFailure`` describing the first few problems.
func verifyAllSynced(_ device: Device, expected: [String: Data], remote: RemoteCopies) async throws {
    let records = try await device.db.getAll(
        sql: "SELECT id, filename, state, has_synced, size, local_uri, attempts, last_error FROM attachments"
    ) { cursor in
        StoredRecord(
            id: try cursor.getString(name: "id"),
            filename: try cursor.getString(name: "filename"),
            state: try cursor.getInt(name: "state"),
            hasSynced: try cursor.getBooleanOptional(name: "has_synced") ?? false,
            size: try cursor.getInt64Optional(name: "size"),
            localUri: try cursor.getStringOptional(name: "local_uri"),
            attempts: try cursor.getIntOptional(name: "attempts") ?? 0,
            lastError: try cursor.getStringOptional(name: "last_error"))
    }
    var problems: [String] = []
    if records.count != expected.count {
        problems.append("\(records.count) records for \(expected.count) attachments")
    }
    let stored = try await remote.allFiles()
    // The folder remote keeps each file's SHA-256 beside it (`.attachment-sync-sha256-<name>`): checked
    // below, not counted as files.
    let hashPrefix = ".attachment-sync-sha256-"
    let remoteFiles = stored.filter { !$0.key.hasPrefix(hashPrefix) }
    let storedHashes = stored.filter { $0.key.hasPrefix(hashPrefix) }
    if remoteFiles.count != expected.count {
        problems.append("the remote holds \(remoteFiles.count) files for \(expected.count) attachments")
    }
    if case .folder = remote, storedHashes.count != expected.count {
        problems.append("the folder remote holds \(storedHashes.count) stored hashes for \(expected.count) files")
    }
    for record in records {
        guard let data = expected[record.id] else {
            problems.append("unexpected record \(record.id)")
            continue
        }
        if record.state != AttachmentState.synced.rawValue || !record.hasSynced {
            problems.append(
                "\(record.id) is in state \(record.state), has_synced \(record.hasSynced), "
                    + "\(record.attempts) failed attempts, last error: \(record.lastError ?? "none")")
        }
        if record.size != Int64(data.count) {
            problems.append("\(record.id) has size \(record.size.map(String.init) ?? "nil"), not \(data.count)")
        }
        let local = record.localUri.flatMap {
            FileManager.default.contents(atPath: device.attachmentsDirectory.appendingPathComponent($0).path)
        }
        if local != data { problems.append("\(record.id)'s local file is missing or has the wrong bytes") }
        if remoteFiles[record.filename] != data {
            problems.append("\(record.id)'s remote copy is missing or has the wrong bytes")
        }
        if case .folder = remote,
            storedHashes[hashPrefix + record.filename].map({
                String(decoding: $0, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            })
                != SHA256.hash(data: data).map({ String(format: "%02x", $0) }).joined()
        {
            problems.append("\(record.id)'s stored SHA-256 in the folder remote is missing or wrong")
        }
        if problems.count > 5 { break }
    }
    guard problems.isEmpty else {
        throw BenchmarkFailure("verification failed: " + problems.prefix(5).joined(separator: "; "))
    }
}
