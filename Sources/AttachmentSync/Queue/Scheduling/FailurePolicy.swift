/// Decides what becomes of a failed transfer: retried at a given time, or given up. A plain value with no
/// I/O; the error handler's verdict, the attempt count, the server's `Retry-After` and the time are its
/// inputs.
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
}
