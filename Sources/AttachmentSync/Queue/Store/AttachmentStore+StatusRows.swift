import Foundation

/// The status rows read from SQL into values: the only place that knows the column names of
/// ``AttachmentStore/statusListsSQL``. It also reads the rows of sums (kinds 0, 3 and 4), which
/// ``AttachmentStore/statusScan(largest:invalidLimit:in:)`` makes without SQL, as the one-query form the tests
/// check the scan against returns them.
extension AttachmentStore {
    /// One status row: totals of a state, or one attachment waiting for a retry. Equatable, so a watch of
    /// the status passes on only a status that changed.
    struct StatusRow: Sendable, Equatable {
        var state: AttachmentState
        var totals: QueueStatus.Totals?
        var localBytes: Int64
        var retry: QueueStatus.Retry?
        var givenUp: QueueStatus.GivenUp?
        var localOnly: QueueStatus.Totals?
        /// Totals of the attachments of `state` handed to a background service.
        var handedOff: QueueStatus.Totals?
        /// Local bytes of one ``CachePolicy/Class``.
        var cacheClass: ClassBytes?
    }

    /// The local bytes of the records of one cache class.
    struct ClassBytes: Sendable, Equatable {
        var cacheClass: CachePolicy.Class
        var bytes: Int64
    }

    static func statusRow(_ cursor: SqlCursor) throws -> StatusRow {
        let rawState = try cursor.getInt(name: "state")
        let state = AttachmentState(rawValue: rawState) ?? .archived
        let kind = try cursor.getInt(name: "kind")
        if kind == 4 {
            let name = try cursor.getString(name: "id")
            let bytes = try cursor.getInt64Optional(name: "bytes") ?? 0
            return StatusRow(
                state: state, localBytes: 0,
                cacheClass: CachePolicy.Class(rawValue: name).map { ClassBytes(cacheClass: $0, bytes: bytes) })
        }
        if kind == 2 {
            return StatusRow(
                state: state, localBytes: 0,
                givenUp: QueueStatus.GivenUp(
                    attachmentId: try cursor.getString(name: "id"), state: state,
                    attempts: try cursor.getIntOptional(name: "attempts") ?? 0,
                    lastError: try cursor.getStringOptional(name: "err"),
                    isLocalOnly: (try cursor.getIntOptional(name: "next") ?? 0) == 1))
        }
        if kind == 5 {
            return StatusRow(
                state: state, localBytes: 0,
                handedOff: QueueStatus.Totals(
                    count: try cursor.getIntOptional(name: "n") ?? 0,
                    bytes: try cursor.getInt64Optional(name: "bytes") ?? 0))
        }
        if kind == 3 {
            return StatusRow(
                state: state, localBytes: 0,
                localOnly: QueueStatus.Totals(
                    count: try cursor.getIntOptional(name: "n") ?? 0,
                    bytes: try cursor.getInt64Optional(name: "bytes") ?? 0))
        }
        if kind == 0 {
            return StatusRow(
                state: state,
                totals: QueueStatus.Totals(
                    count: try cursor.getInt(name: "n"), bytes: try cursor.getInt64Optional(name: "bytes") ?? 0,
                    unknownSizeCount: try cursor.getIntOptional(name: "attempts") ?? 0,
                    invalidSizeCount: try cursor.getIntOptional(name: "next") ?? 0),
                localBytes: try cursor.getInt64Optional(name: "local") ?? 0)
        }
        let next = try cursor.getInt64Optional(name: "next") ?? 0
        return StatusRow(
            state: state, localBytes: 0,
            retry: QueueStatus.Retry(
                attachmentId: try cursor.getString(name: "id"), state: state,
                attempts: try cursor.getIntOptional(name: "attempts") ?? 0,
                nextAttemptAt: WallClock.date(milliseconds: next),
                lastError: try cursor.getStringOptional(name: "err"),
                awaitingUpload: try cursor.getIntOptional(name: "local") ?? 0,
                networkFailures: try cursor.getIntOptional(name: "net") ?? 0,
                localFileFailures: try cursor.getIntOptional(name: "lfs") ?? 0,
                keyFailures: try cursor.getIntOptional(name: "kua") ?? 0))
    }
}
