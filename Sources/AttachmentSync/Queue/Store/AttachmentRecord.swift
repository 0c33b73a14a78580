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
        var reader = Reader()
        self = try reader.read(cursor)
    }

    /// Reads the records of one query's rows, looking each column's position up on the first row only
    /// (rather than by name for every column of every row: the scheduler reads many records for each
    /// transfer that finishes). Errors are those of ``init(cursor:)``.
    struct Reader {
        private var layout: Layout?

        /// Where each column is in the rows of one query (`nil`: not selected).
        private struct Layout {
            let columns: SqlColumns
            let id, filename, localUri, timestamp, size, mediaType, state, hasSynced, metaData, contentHash: Int?
            let attempts, nextAttemptAt, lastError, onDemand, pinned, lastUsedAt, givenUp, awaitingUpload: Int?
            let connectivityFailure, localUnavailable, keyUnavailable: Int?

            init(_ columns: SqlColumns) {
                func at(_ column: AttachmentColumn) -> Int? { columns.index(of: column.name) }
                self.columns = columns
                id = columns.index(of: "id")
                filename = at(.filename)
                localUri = at(.localUri)
                timestamp = at(.timestamp)
                size = at(.size)
                mediaType = at(.mediaType)
                state = at(.state)
                hasSynced = at(.hasSynced)
                metaData = at(.metaData)
                contentHash = at(.contentHash)
                attempts = at(.attempts)
                nextAttemptAt = at(.nextAttemptAt)
                lastError = at(.lastError)
                onDemand = at(.onDemand)
                pinned = at(.pinned)
                lastUsedAt = at(.lastUsedAt)
                givenUp = at(.givenUp)
                awaitingUpload = at(.awaitingUpload)
                connectivityFailure = at(.connectivityFailure)
                localUnavailable = at(.localUnavailable)
                keyUnavailable = at(.keyUnavailable)
            }
        }

        private mutating func layout(for cursor: SqlCursor) -> Layout {
            if let layout, layout.columns === cursor.columns { return layout }
            let made = Layout(cursor.columns)
            layout = made
            return made
        }

        /// The id of the cursor's row (a required `TEXT`), without reading the rest of the record.
        mutating func id(_ cursor: SqlCursor) throws -> String {
            let string = try cursor.stringOptional(at: layout(for: cursor).id, name: "id")
            guard let string else { throw SqlCursor.null("id") }
            return string
        }

        /// The record of the cursor's row, whose id (``id(_:)``) may be given when it was read already.
        mutating func read(_ cursor: SqlCursor, id knownID: String? = nil) throws -> AttachmentRecord {
            let id = try knownID ?? self.id(cursor)
            let layout = layout(for: cursor)
            do {
                return try Self.record(id: id, cursor, layout)
            } catch var error as LocalDatabaseError where error.code == .typeMismatch || error.code == .nullValue {
                if !error.message.hasPrefix("attachment ") {
                    error.message = "attachment \(String(reflecting: id)): \(error.message)"
                }
                throw error
            }
        }

        private static func record(id: String, _ cursor: SqlCursor, _ at: Layout) throws -> AttachmentRecord {
            guard let rawState = try cursor.intOptional(at: at.state, name: "state") else {
                throw SqlCursor.null("state")
            }
            guard let state = AttachmentState(rawValue: rawState) else {
                throw LocalDatabaseError(
                    code: .typeMismatch,
                    message: "attachment \(String(reflecting: id)) has unknown state \(rawState)",
                    name: "state"
                )
            }
            var record = AttachmentRecord(
                id: id,
                filename: try cursor.stringOptional(at: at.filename, name: "filename") ?? id,
                state: state,
                timestamp: try cursor.int64Optional(at: at.timestamp, name: "timestamp") ?? 0,
                hasSynced: try cursor.booleanOptional(at: at.hasSynced, name: "has_synced") ?? false,
                localPath: try cursor.stringOptional(at: at.localUri, name: "local_uri"),
                mediaType: try cursor.stringOptional(at: at.mediaType, name: "media_type"),
                size: try cursor.int64Optional(at: at.size, name: "size"),
                metaData: try cursor.stringOptional(at: at.metaData, name: "meta_data"),
                contentHash: try cursor.stringOptional(at: at.contentHash, name: "content_hash")
            )
            record.attempts = try cursor.intOptional(at: at.attempts, name: "attempts") ?? 0
            record.nextAttemptAt = try cursor.int64Optional(at: at.nextAttemptAt, name: "next_attempt_at")
            record.lastError = try cursor.stringOptional(at: at.lastError, name: "last_error")
            record.onDemand = try cursor.booleanOptional(at: at.onDemand, name: "on_demand") ?? false
            record.pinned = try cursor.booleanOptional(at: at.pinned, name: "pinned") ?? false
            record.lastUsedAt = try cursor.int64Optional(at: at.lastUsedAt, name: "last_used_at")
            record.givenUp = try cursor.intOptional(at: at.givenUp, name: "given_up").flatMap(
                AttachmentState.init(rawValue:))
            record.awaitingUpload = try cursor.intOptional(at: at.awaitingUpload, name: "awaiting_upload")
            record.connectivityFailures = try cursor.intOptional(
                at: at.connectivityFailure, name: "connectivity_failure")
            record.localUnavailable = try cursor.intOptional(at: at.localUnavailable, name: "local_unavailable")
            record.keyUnavailable = try cursor.intOptional(at: at.keyUnavailable, name: "key_unavailable")
            return record
        }
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
