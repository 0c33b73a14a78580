/// Decides what becomes of a failed transfer: retried at a given time, waiting without spending an attempt,
/// or given up. A plain value with no I/O; what the worker found (``TransferFailure``, the error handler's
/// verdict included), the record's counts, the server's `Retry-After` and the time are its inputs. The
/// state machine holds one; the store books what it decides (``AttachmentStore/book(_:of:timestamp:in:)``).
struct FailurePolicy: Sendable {
    /// The waits between attempts.
    var retryBackoff: RetryBackoff
    /// The most attempts before giving up, or `nil` for no limit.
    var maxAttempts: Int?
    /// The waits of a download whose remote file does not exist yet.
    var notUploadedYetBackoff = RetryBackoff(initialDelay: .seconds(60), maximumDelay: .seconds(900))

    /// What to do after a failure.
    enum Decision: Equatable, Sendable {
        /// Try again, not before `at` (milliseconds since 1970).
        case retry(at: Int64)
        /// Give up: the error handler said so.
        case giveUpByHandler
        /// Give up: this was the last attempt ``maxAttempts`` allows.
        case giveUpAfterMaxAttempts
    }

    /// The decision after the `attempt`-th failure in a row.
    ///
    /// The error handler decides first (`handlerRetries`, `true` without a handler), then ``maxAttempts``.
    /// A retry waits the backoff delay, or the server's `retryAfter` when longer, but never longer than the
    /// backoff's ``RetryBackoff/maximumDelay``.
    ///
    /// - Parameters:
    ///   - now: The current time in milliseconds since 1970.
    ///   - generator: Draws the jitter.
    func decide(
        attempt: Int, handlerRetries: Bool, retryAfter: Duration?, now: Int64,
        using generator: inout some RandomNumberGenerator
    ) -> Decision {
        guard handlerRetries else { return .giveUpByHandler }
        if let maxAttempts, attempt >= maxAttempts { return .giveUpAfterMaxAttempts }
        let delay = retryBackoff.delay(afterAttempt: attempt, retryAfter: retryAfter, using: &generator)
        return .retry(at: now.addingClamped(delay.clampedMilliseconds))
    }

    /// When to try again after the `wait`-th failure in a row that spent no attempt (the network's, or local
    /// files out of reach): the backoff's delay for that count, never given up.
    func retryTime(afterWait wait: Int, now: Int64, using generator: inout some RandomNumberGenerator) -> Int64 {
        let delay = retryBackoff.delay(afterAttempt: wait, retryAfter: nil, using: &generator)
        return now.addingClamped(delay.clampedMilliseconds)
    }

    /// The decision after the `wait`-th download in a row found no remote file: the uploading device has
    /// not finished. Not a failed attempt: ``maxAttempts`` does not apply, only the error handler's verdict
    /// (asked with the attempt count the failures so far make), and the wait follows
    /// ``notUploadedYetBackoff``.
    func decideNotUploadedYet(
        wait: Int, handlerRetries: Bool, now: Int64, using generator: inout some RandomNumberGenerator
    ) -> Decision {
        guard handlerRetries else { return .giveUpByHandler }
        let delay = notUploadedYetBackoff.delay(afterAttempt: wait, retryAfter: nil, using: &generator)
        return .retry(at: now.addingClamped(delay.clampedMilliseconds))
    }

    /// What becomes of `record` after its transfer failed as `failure` says, at `now` (milliseconds since
    /// 1970).
    ///
    /// A conflict, a gone or changed local file give the transfer up; the local files out of reach, no
    /// answer from remote storage and a missing encryption key spend no attempt and wait on their own
    /// count's backoff; a network gone
    /// interrupts; a download whose remote file is not there yet waits for the upload; anything else is
    /// the `attempt`-th failed try, retried or given up by ``decide(attempt:handlerRetries:retryAfter:now:using:)``.
    func outcome(
        of failure: TransferFailure, record: AttachmentRecord, now: Int64,
        using generator: inout some RandomNumberGenerator
    ) -> FailureOutcome {
        let attempt = record.attempts + 1
        // A given-up delete lets go of its local file: deleteFile removed it (or is removing it).
        let releasing = record.state == .queuedDelete
        switch failure.kind {
        case .conflict, .changedSinceSave:
            return .giveUp(attempts: attempt, releasingLocalFile: releasing, afterMaxAttempts: false)
        case .localFileGone:
            return .giveUp(attempts: 1, releasingLocalFile: true, afterMaxAttempts: false)
        case .networkGone:
            return .interrupted
        case .localFilesOutOfReach:
            let count = (record.localUnavailable ?? 0) + 1
            return .wait(.localFiles, count: count, at: retryTime(afterWait: count, now: now, using: &generator))
        case .noAnswer:
            let count = (record.connectivityFailures ?? 0) + 1
            return .wait(.network, count: count, at: retryTime(afterWait: count, now: now, using: &generator))
        case .keyUnavailable:
            let count = (record.keyUnavailable ?? 0) + 1
            return .wait(.key, count: count, at: retryTime(afterWait: count, now: now, using: &generator))
        case .notUploadedYet(let handlerRetries):
            let wait = (record.awaitingUpload ?? 0) + 1
            switch decideNotUploadedYet(wait: wait, handlerRetries: handlerRetries, now: now, using: &generator) {
            case .retry(let at): return .awaitUpload(wait: wait, at: at)
            case .giveUpByHandler, .giveUpAfterMaxAttempts:
                return .giveUp(attempts: attempt, releasingLocalFile: releasing, afterMaxAttempts: false)
            }
        case .other(let handlerRetries):
            let decision = decide(
                attempt: attempt, handlerRetries: handlerRetries, retryAfter: failure.retryAfter, now: now,
                using: &generator)
            switch decision {
            case .retry(let at): return .retry(attempt: attempt, at: at)
            case .giveUpByHandler:
                return .giveUp(attempts: attempt, releasingLocalFile: releasing, afterMaxAttempts: false)
            case .giveUpAfterMaxAttempts:
                return .giveUp(attempts: attempt, releasingLocalFile: releasing, afterMaxAttempts: true)
            }
        }
    }
}

/// Why a transfer waits without having spent an attempt.
enum WaitReason: Sendable, Equatable {
    /// No answer from remote storage.
    case network
    /// The local file or folder was out of reach.
    case localFiles
    /// The encryption key the file needs is not on this device (yet).
    case key
}

/// What becomes of a failed transfer's record (see ``FailurePolicy/outcome(of:record:now:using:)``).
enum FailureOutcome: Sendable, Equatable {
    /// The `attempt`-th failed try: tried again not before `at` (milliseconds since 1970).
    case retry(attempt: Int, at: Int64)
    /// A failure that spent no attempt, the `count`-th in a row for `reason`: tried again not before `at`.
    case wait(WaitReason, count: Int, at: Int64)
    /// A download waits for the uploading device: the `wait`-th "not there yet" in a row; asked again not
    /// before `at`. No attempt is spent.
    case awaitUpload(wait: Int, at: Int64)
    /// Given up after `attempts` tries: the record is archived and marked. It lets go of its local file
    /// when `releasingLocalFile` (the file is gone, or a delete removed it).
    case giveUp(attempts: Int, releasingLocalFile: Bool, afterMaxAttempts: Bool)
    /// Interrupted, as by `stopSync`: nothing is booked.
    case interrupted

    /// The time it is tried again, if it is.
    var retryAt: Int64? {
        switch self {
        case .retry(_, let at), .wait(_, _, let at), .awaitUpload(_, let at): at
        case .giveUp, .interrupted: nil
        }
    }
}
