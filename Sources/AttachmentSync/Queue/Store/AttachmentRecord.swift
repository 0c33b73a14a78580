import Foundation

/// A row of the attachments table as stored: like ``Attachment``, but with the local file's path relative
/// to the attachments directory.
struct AttachmentRecord: Sendable, Hashable {
    var id: String
    var filename: String
    var state: AttachmentState
    var timestamp: Int64
    var hasSynced: Bool = false
    /// The local file's path relative to the attachments directory, or `nil` when it is not on the device.
    var localPath: String?
    var mediaType: String?
    var size: Int64?
    var metaData: String?
    /// SHA-256 of the content (lowercase hex), when known: verified after every download.
    var contentHash: String?
    /// Failed tries of the pending transfer.
    var attempts: Int = 0
    /// Milliseconds since 1970 before which the pending transfer is not retried.
    var nextAttemptAt: Int64?
    /// The last failure's description.
    var lastError: String?
    /// Fetched only on request (the download policy's decision when the record was made).
    var onDemand: Bool = false
    /// Exempt from eviction under the cache budget.
    var pinned: Bool = false
    /// Milliseconds since 1970 of the content's last use (saved, downloaded, asked for), for LRU eviction.
    var lastUsedAt: Int64?
    /// The queued state whose transfer was given up (the record is then archived), or `nil`.
    var givenUp: AttachmentState?
    /// How many downloads in a row found no remote file: the uploading device has not finished (see
    /// ``AttachmentQueue/Configuration/notUploadedYetBackoff``); `nil` when the last answer was another.
    var awaitingUpload: Int?
    /// How many tries in a row failed for the network (see ``AttachmentColumn/connectivityFailure``).
    var connectivityFailures: Int?
    /// How many tries in a row could not reach the local files (see ``AttachmentColumn/localUnavailable``).
    var localUnavailable: Int?
    /// How many tries in a row found the key missing (see ``AttachmentColumn/keyUnavailable``).
    var keyUnavailable: Int?

    /// Whether the content is on this device and has never reached remote storage: the local file is the
    /// only copy, so nothing may evict or purge it.
    var isLocalOnly: Bool { localPath != nil && !hasSynced }

    /// The columns ``init(cursor:)`` reads, for `SELECT`s.
    static let columns = AttachmentColumn.selectList
}

extension AttachmentRecord {
    /// Reads a record; a column holding a value of the wrong type is a ``LocalDatabaseError`` that names
    /// the attachment as well as the column and the value.
    init(cursor: SqlCursor) throws {
        let id = try cursor.getString(name: "id")
        do {
            try self.init(id: id, cursor: cursor)
        } catch var error as LocalDatabaseError where error.code == .typeMismatch || error.code == .nullValue {
            if !error.message.hasPrefix("attachment ") {
                error.message = "attachment \(String(reflecting: id)): \(error.message)"
            }
            throw error
        }
    }

    private init(id: String, cursor: SqlCursor) throws {
        let rawState = try cursor.getInt(name: "state")
        guard let state = AttachmentState(rawValue: rawState) else {
            throw LocalDatabaseError(
                code: .typeMismatch,
                message: "attachment \(String(reflecting: id)) has unknown state \(rawState)",
                name: "state"
            )
        }
        self.init(
            id: id,
            filename: try cursor.getStringOptional(name: "filename") ?? id,
            state: state,
            timestamp: try cursor.getInt64Optional(name: "timestamp") ?? 0,
            hasSynced: try cursor.getBooleanOptional(name: "has_synced") ?? false,
            localPath: try cursor.getStringOptional(name: "local_uri"),
            mediaType: try cursor.getStringOptional(name: "media_type"),
            size: try cursor.getInt64Optional(name: "size"),
            metaData: try cursor.getStringOptional(name: "meta_data"),
            contentHash: try cursor.getStringOptional(name: "content_hash")
        )
        attempts = try cursor.getIntOptional(name: "attempts") ?? 0
        nextAttemptAt = try cursor.getInt64Optional(name: "next_attempt_at")
        lastError = try cursor.getStringOptional(name: "last_error")
        onDemand = try cursor.getBooleanOptional(name: "on_demand") ?? false
        pinned = try cursor.getBooleanOptional(name: "pinned") ?? false
        lastUsedAt = try cursor.getInt64Optional(name: "last_used_at")
        givenUp = try cursor.getIntOptional(name: "given_up").flatMap(AttachmentState.init(rawValue:))
        awaitingUpload = try cursor.getIntOptional(name: "awaiting_upload")
        connectivityFailures = try cursor.getIntOptional(name: "connectivity_failure")
        localUnavailable = try cursor.getIntOptional(name: "local_unavailable")
        keyUnavailable = try cursor.getIntOptional(name: "key_unavailable")
    }

    /// The value this record stores in `column`.
    func value(of column: AttachmentColumn) -> (any SqlValueConvertible)? {
        switch column {
        case .filename: filename
        case .localUri: localPath
        case .timestamp: timestamp
        case .size: size
        case .mediaType: mediaType
        case .state: state.rawValue
        case .hasSynced: hasSynced
        case .metaData: metaData
        case .contentHash: contentHash
        case .attempts: attempts
        case .nextAttemptAt: nextAttemptAt
        case .lastError: lastError
        case .onDemand: onDemand
        case .pinned: pinned
        case .lastUsedAt: lastUsedAt
        case .givenUp: givenUp?.rawValue
        case .awaitingUpload: awaitingUpload
        case .connectivityFailure: connectivityFailures
        case .localUnavailable: localUnavailable
        case .keyUnavailable: keyUnavailable
        }
    }

    /// The name of this record's local file (the one `saveFile` gave it, or a download writes): the id
    /// made safe, then the extension: everything after `<id>.` when the filename is derived from the id
    /// (`<id>.tar.gz` gives `tar.gz`), else the filename's last extension. Startup relies on it to recognise
    /// the file of a record that no longer claims one.
    func localName() throws -> String {
        try Self.localName(id: id, filename: filename)
    }

    /// ``localName()`` of a record of `id` and `filename`.
    static func localName(id: String, filename: String) throws -> String {
        let derivedPrefix = id + "."
        let ext: String?
        if filename.utf8.starts(with: derivedPrefix.utf8), filename.utf8.count > derivedPrefix.utf8.count {
            ext = String(decoding: filename.utf8.dropFirst(derivedPrefix.utf8.count), as: UTF8.self)
        } else {
            ext = FileName.localExtension(fileExtension: nil, filename: filename)
        }
        return try FileName.localName(id: id, fileExtension: FileName.normalizedExtension(ext, attachmentId: id))
    }

    /// The public value, with the local path resolved against `directory`.
    func attachment(in directory: URL) -> Attachment {
        attachment(inPath: directory.path)
    }

    /// The public value of the record, its local file's path in the folder at `directory`.
    func attachment(inPath directory: String) -> Attachment {
        Attachment(
            id: id,
            filename: filename,
            state: state,
            timestamp: timestamp,
            hasSynced: hasSynced,
            localUri: localPath.map { FileName.join(directory, $0) },
            mediaType: mediaType,
            size: size,
            metaData: metaData,
            contentHash: contentHash,
            isOnDemand: onDemand,
            isPinned: pinned,
            givenUp: givenUp
        )
    }
}
