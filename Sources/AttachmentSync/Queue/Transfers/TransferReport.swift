/// What one transfer did, as its worker found it: facts only. The worker decides nothing about the
/// record's future and writes no failure; the queue hands a failure to the state machine, which decides
/// (``FailurePolicy/outcome(of:record:now:using:)``), and to the store, which books the decision.
enum TransferReport: Sendable {
    /// Done and committed; `bytes` moved (0 for a delete).
    case completed(bytes: Int64)
    /// Done, but the record had changed meanwhile (deleted, archived, re-queued): nothing committed.
    case superseded
    /// Interrupted by `stopSync`, `close` or a newer decision; not an error.
    case cancelled
    /// Failed, for the reason the failure names.
    case failed(TransferFailure)
    /// A download asked for on demand failed; nothing is to be booked (the caller decides what to do).
    case failedOnRequest(any Error)
    /// Handed to the background transfer service (recorded first): its result is adopted when the service
    /// reports it.
    case handedOff
}

/// A failed transfer: the error, and what the worker found out about it.
struct TransferFailure: Sendable {
    /// What the failure was, as far as deciding its outcome goes.
    enum Kind: Sendable, Equatable {
        /// Remote storage holds other content under the upload's name: trying again cannot help.
        case conflict
        /// The local file or folder was out of reach (a permission, an I/O error, a locked device's protected
        /// data: anything but "no such file"). No failed try.
        case localFilesOutOfReach
        /// The network was unreachable when the transfer failed: no failed try, the transfer waits for it as
        /// if interrupted.
        case networkGone
        /// No answer from remote storage at all, whatever the network source says. No failed try.
        case noAnswer
        /// The encryption key the file needs is not on this device (yet). No failed try, never given up.
        case keyUnavailable
        /// The upload's local file is gone: there is nothing to upload, ever.
        case localFileGone
        /// The upload's local file is no longer what was saved (size or SHA-256).
        case changedSinceSave
        /// A download found no remote file: the uploading device has not finished. `handlerRetries` is the
        /// error handler's verdict (`true` without a handler).
        case notUploadedYet(handlerRetries: Bool)
        /// Any other failure; `handlerRetries` is the error handler's verdict (`true` without a handler).
        case other(handlerRetries: Bool)
    }

    var error: any Error
    var kind: Kind

    /// The server's `Retry-After`, when it sent one.
    var retryAfter: Duration? { (error as? AttachmentError)?.retryAfter }
}
