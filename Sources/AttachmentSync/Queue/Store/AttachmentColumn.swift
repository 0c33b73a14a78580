/// The columns of the attachments table besides `id`, in the order they are created: the one list from
/// which the table's definition, the queue's `SELECT`s and its `INSERT` are made.
///
/// `local_uri` holds the file's path relative to the queue's attachments directory (apps' sandbox paths
/// change between launches, so absolute paths are never stored).
enum AttachmentColumn: String, CaseIterable, Sendable {
    case filename
    case localUri = "local_uri"
    case timestamp
    case size
    case mediaType = "media_type"
    case state
    case hasSynced = "has_synced"
    case metaData = "meta_data"
    case contentHash = "content_hash"
    case attempts
    case nextAttemptAt = "next_attempt_at"
    case lastError = "last_error"
    case onDemand = "on_demand"
    case pinned
    case lastUsedAt = "last_used_at"
    case givenUp = "given_up"
    case awaitingUpload = "awaiting_upload"
    /// How many tries in a row failed for the network (no answer from remote storage at all), else NULL.
    /// Such failures spend no attempt; the count sets their backoff, which resets when the network comes
    /// back.
    case connectivityFailure = "connectivity_failure"
    /// How many tries in a row could not reach the local file or folder (permission denied, an I/O error,
    /// the protected data of a locked device: anything but "no such file"), else NULL. Such failures spend
    /// no attempt and give nothing up; the count sets their backoff, which resets once a transfer reaches
    /// the local files again.
    case localUnavailable = "local_unavailable"
    /// How many tries in a row found the encryption key the file needs missing from the app's
    /// ``KeyProvider``, else NULL. Such failures spend no attempt and give nothing up; the count sets their
    /// backoff, which starts over when the app reports new keys (``AttachmentQueue/keysDidChange()``).
    case keyUnavailable = "key_unavailable"

    /// The column's name in SQL.
    var name: String { rawValue }

    /// The column's definition for the table.
    var definition: Column {
        switch self {
        case .filename, .localUri, .mediaType, .metaData, .contentHash, .lastError: .text(name)
        case .timestamp, .size, .state, .hasSynced, .attempts, .nextAttemptAt, .onDemand, .pinned, .lastUsedAt,
            .givenUp, .awaitingUpload, .connectivityFailure, .localUnavailable, .keyUnavailable:
            .integer(name)
        }
    }

    /// `id` and every column, comma-separated, for `SELECT`s and `INSERT`s.
    static let selectList = (["id"] + allCases.map(\.name)).joined(separator: ", ")
}

/// Named sets of states for SQL, so no query spells a state by its number.
enum StateSet {
    /// The states of a pending transfer: download, upload, delete.
    static let queued: [AttachmentState] = [.queuedDownload, .queuedUpload, .queuedDelete]

    /// `(0, 1, 2)`-style SQL list of `states`.
    static func sql(_ states: [AttachmentState]) -> String {
        "(" + states.map { String($0.rawValue) }.joined(separator: ", ") + ")"
    }

    /// The SQL list of ``queued``.
    static let queuedSQL = sql(queued)
}
