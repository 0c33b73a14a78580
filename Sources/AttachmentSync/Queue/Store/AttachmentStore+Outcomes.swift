/// The writes that book what became of a transfer: each a conditional write that changes nothing when the
/// record has moved on meanwhile (deleted, archived, queued anew), and says so.
extension AttachmentStore {
    /// An upload reached remote storage: the record becomes `synced`, with the uploaded size, its retry
    /// state cleared. `false` when it was no longer a queued upload.
    func markUploaded(id: String, size: Int64, timestamp: Int64, in tx: SqlTransaction) throws -> Bool {
        try transition(
            id: id, from: .queuedUpload, to: .synced, timestamp: timestamp,
            set: .hasSynced(true) + .set(.size, size) + .retryStateCleared, in: tx)
    }

    /// A remote delete is done: the record goes. `false` when it was no longer a queued delete.
    func markDeleted(id: String, in tx: SqlTransaction) throws -> Bool {
        try delete(id: id, ifState: .queuedDelete, in: tx)
    }

    /// Books a failed transfer's outcome on its record, which must still be in the state the transfer ran
    /// in. A retry or a wait keeps the state and the timestamp (a failure is no state change, and must not
    /// wake the sync trigger); giving up archives the record and marks it (``AttachmentRecord/givenUp``).
    /// Returns whether the record was changed (`true` for ``FailureOutcome/interrupted``, which books
    /// nothing).
    func book(
        _ outcome: FailureOutcome, of record: AttachmentRecord, error: any Error, timestamp: Int64,
        in tx: SqlTransaction
    ) throws -> Bool {
        let message = RecordChange.lastError(error)
        switch outcome {
        case .interrupted:
            return true
        case .retry(let attempt, let at):
            return try update(
                id: record.id, ifState: record.state,
                set: .retryStateCleared + .set(.attempts, attempt) + .set(.nextAttemptAt, at) + message, in: tx)
        case .wait(let reason, let count, let at):
            let counted: AttachmentColumn =
                switch reason {
                case .network: .connectivityFailure
                case .localFiles: .localUnavailable
                case .key: .keyUnavailable
                }
            // One reason at a time: the other counts start over.
            let cleared = [AttachmentColumn.connectivityFailure, .localUnavailable, .keyUnavailable]
                .filter { $0 != counted }.reduce(RecordChange.none) { $0 + .set($1, nil) }
            return try update(
                id: record.id, ifState: record.state,
                set: .set(.nextAttemptAt, at) + message + .set(counted, count) + cleared
                    + .set(.awaitingUpload, nil), in: tx)
        case .awaitUpload(let wait, let at):
            return try update(
                id: record.id, ifState: .queuedDownload,
                set: .set(.awaitingUpload, wait) + .set(.nextAttemptAt, at) + message, in: tx)
        case .giveUp(let attempts, let releasingLocalFile, _):
            return try transition(
                id: record.id, from: record.state, to: .archived, timestamp: timestamp,
                set: (releasingLocalFile ? .localFileReleased : .none) + .set(.attempts, attempts)
                    + .set(.nextAttemptAt, nil) + message + .set(.givenUp, record.state.rawValue)
                    + .set(.awaitingUpload, nil),
                in: tx)
        }
    }
}
