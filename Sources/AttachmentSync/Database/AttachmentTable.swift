/// The columns of the attachments table, in the order they are created (see ``AttachmentColumn``).
let attachmentTableColumns: [Column] = AttachmentColumn.allCases.map(\.definition)

/// The definition of the local-only table in which the attachment queue keeps each attachment's state.
///
/// Add it to your ``Schema`` next to your own tables and give the queue the same name (the default,
/// `attachments`, on both sides):
///
/// ```swift
/// let schema = Schema(tables: [
///     checklists,
///     createAttachmentTable(name: "attachments"),
/// ])
/// ```
///
/// Its columns, besides the implicit `id TEXT PRIMARY KEY`: `filename` (TEXT), `local_uri` (TEXT, relative
/// to the attachments directory), `timestamp` (INTEGER, milliseconds since 1970 of the last change), `size`
/// (INTEGER, bytes), `media_type` (TEXT), `state` (INTEGER, an ``AttachmentState`` raw value),
/// `has_synced` (INTEGER, whether the file ever reached remote storage) and `meta_data` (TEXT, the app's
/// own, JSON for instance), and the queue's own `content_hash` (TEXT, SHA-256 of the content in hex),
/// `attempts` (INTEGER, failed tries of the pending transfer), `next_attempt_at` (INTEGER, milliseconds
/// since 1970 before which it is not retried), `last_error` (TEXT), `on_demand` (INTEGER, fetched only on
/// request), `pinned` (INTEGER, exempt from cache eviction) and `last_used_at` (INTEGER, milliseconds since
/// 1970 of the content's last use, for least-recently-used eviction), `given_up` (INTEGER, the raw
/// ``AttachmentState`` of a transfer the queue gave up on, else NULL), `awaiting_upload` (INTEGER, how
/// many downloads in a row found no remote file yet, else NULL), `connectivity_failure` (INTEGER, how many
/// tries in a row got no answer from remote storage, else NULL), `local_unavailable` (INTEGER, how many
/// tries in a row could not reach the local files, else NULL) and `key_unavailable` (INTEGER, how many tries
/// in a row found the encryption key missing, else NULL); the last four count failures that spend no
/// attempt. An index on (`state`, `timestamp`)
/// serves the queue's "oldest queued first" look-ups, one on (`state`, `next_attempt_at`) its look-up of
/// the next retry time, and one on `filename` its check that no two attachments share a remote file; with
/// them, starting the next transfer costs the same however many are queued. Opening a database whose attachments table lacks newer columns or indexes adds
/// them.
///
/// - Parameter name: The table's name. The default is `attachments`.
public func createAttachmentTable(name: String = "attachments") -> Table {
    Table(
        name: name,
        columns: attachmentTableColumns,
        indexes: [
            Index(name: "state_timestamp", columns: [.ascending("state"), .ascending("timestamp")]),
            Index(name: "state_retry", columns: [.ascending("state"), .ascending("next_attempt_at")]),
            Index(name: "filename", columns: [.ascending("filename")]),
        ],
        localOnly: true
    )
}
