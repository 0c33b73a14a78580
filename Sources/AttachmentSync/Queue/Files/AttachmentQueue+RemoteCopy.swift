import Foundation

/// What remote storage says about an attachment's copy, asked before a local file is deleted on the
/// grounds that the remote has it (eviction, archive trim, purge, repair).
enum RemoteCopyEvidence: Sendable {
    /// The remote holds the content: a file of the record's size whose stored SHA-256 is the record's.
    case intact
    /// The remote was asked and does not hold the content (no file, or one of another size or SHA-256);
    /// the text says what it holds.
    case notIntact(String)
    /// The remote cannot describe its files (not a ``ListableRemoteStorage``), or keeps no SHA-256 with
    /// them and the record knows no size to compare: only the record's word (`has_synced`) is left.
    case cannotAsk
    /// The remote could not be asked now (offline, an error).
    case unreachable(any Error)
}

extension AttachmentQueue {
    /// Asks remote storage whether it holds `record`'s content intact, without downloading it: with a
    /// ``ListableRemoteStorage``, its ``ListableRemoteStorage/fileInfo(attachment:)`` must report the record's
    /// size (when the record knows it) and the record's SHA-256 (when both know one), and at least one of the
    /// two must have been compared.
    func remoteCopyEvidence(for record: AttachmentRecord) async -> RemoteCopyEvidence {
        guard let remote = remoteStorage as? any ListableRemoteStorage else { return .cannotAsk }
        let info: RemoteObjectInfo?
        do {
            info = try await remote.fileInfo(attachment: record.attachment(in: attachmentsDirectory))
        } catch {
            return .unreachable(error)
        }
        return Self.evidence(info, for: record)
    }

    /// The verdict on what the remote reported (`nil`: no file) for `record`: its size must be the record's
    /// (when both are known), and its stored SHA-256 the record's; a record without a SHA-256 is confirmed by
    /// the size alone. A remote file without a stored SHA-256 (or size) to compare cannot confirm anything.
    static func evidence(_ info: RemoteObjectInfo?, for record: AttachmentRecord) -> RemoteCopyEvidence {
        guard let info else { return .notIntact("remote storage has no file \(String(reflecting: record.filename))") }
        if let expected = record.size, let size = info.size, expected != size {
            return .notIntact("the remote file is \(size) bytes long, the record says \(expected)")
        }
        let stored = info.sha256.map { $0.lowercased() }.flatMap { FileStreaming.isSHA256($0) ? $0 : nil }
        if let expected = record.contentHash?.lowercased() {
            guard let stored else { return .cannotAsk }
            return stored == expected
                ? .intact : .notIntact("the remote file is stored with SHA-256 \(stored), the record says \(expected)")
        }
        return record.size != nil && info.size != nil ? .intact : .cannotAsk
    }
}
