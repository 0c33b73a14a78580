/// Columns to set on a record, each named by its typed ``AttachmentColumn``: what the store's conditional
/// writes (``AttachmentStore/transition(id:from:to:timestamp:set:ifLocalPath:in:)`` and
/// ``AttachmentStore/update(id:ifState:set:ifLocalPath:in:)``) take. Changes combine with `+`; a column set
/// twice takes the later value.
///
/// The combinations the queue uses in several places have names here, so that no code outside the store
/// spells a column.
struct RecordChange: Sendable {
    /// The columns and values, in order.
    private(set) var assignments: [(column: AttachmentColumn, value: (any SqlValueConvertible)?)] = []

    /// No column.
    static let none = RecordChange()

    /// One column set to `value` (`nil` for `NULL`).
    static func set(_ column: AttachmentColumn, _ value: (any SqlValueConvertible)?) -> RecordChange {
        RecordChange(assignments: [(column, value)])
    }

    static func + (lhs: RecordChange, rhs: RecordChange) -> RecordChange {
        RecordChange(assignments: lhs.assignments + rhs.assignments)
    }

    /// The assignments with only the last value of a column set twice.
    var effective: [(column: AttachmentColumn, value: (any SqlValueConvertible)?)] {
        var seen: Set<AttachmentColumn> = []
        return assignments.reversed().filter { seen.insert($0.column).inserted }.reversed()
    }

    // MARK: - Named changes

    /// Clears a transfer's retry state: its attempts, retry time, last error and the counts of failures
    /// that spent no attempt (once it succeeds, or is queued again).
    static let retryStateCleared: RecordChange =
        .set(.attempts, 0) + .set(.nextAttemptAt, nil) + .set(.lastError, nil) + .set(.awaitingUpload, nil)
        + .set(.connectivityFailure, nil) + .set(.localUnavailable, nil) + .set(.keyUnavailable, nil)

    /// Clears the mark of a given-up transfer.
    static let givenUpCleared: RecordChange = .set(.givenUp, nil)

    /// The record lets go of its local file (the column only; the file is the caller's).
    static let localFileReleased: RecordChange = .set(.localUri, nil)

    /// The record refers to the local file `name` (relative to the attachments directory).
    static func localFile(_ name: String?) -> RecordChange { .set(.localUri, name) }

    /// The content reached remote storage (or came from it): `has_synced`.
    static func hasSynced(_ value: Bool) -> RecordChange { .set(.hasSynced, value) }

    /// The content's size and SHA-256 as known now.
    static func content(size: Int64?, sha256: String?) -> RecordChange {
        .set(.size, size) + .set(.contentHash, sha256)
    }

    /// A failure's description, cut to the first 1,000 characters (a server's error page can be long).
    static func lastError(_ error: any Error) -> RecordChange {
        lastError(String(describing: error))
    }

    /// A failure's description, cut to the first 1,000 characters.
    static func lastError(_ message: String) -> RecordChange {
        .set(.lastError, String(message.prefix(1000)))
    }
}
