/// How long a failed transfer waits before it is tried again: exponential backoff with full jitter.
///
/// The n-th failure in a row waits a random time between zero and `min(maximumDelay, initialDelay × 2ⁿ⁻¹)`
/// (or exactly that bound without jitter). Jitter spreads the retries of many devices that went offline
/// together, so they do not come back at the same instant.
///
/// ```swift
/// configuration.retryBackoff = RetryBackoff(initialDelay: .seconds(2), maximumDelay: .seconds(600))
/// ```
public struct RetryBackoff: Sendable, Hashable, CustomStringConvertible {
    /// The bound of the first wait. The default is 1 second.
    public var initialDelay: Duration
    /// The largest bound, reached after a few doublings. The default is 5 minutes.
    public var maximumDelay: Duration
    /// Whether the wait is drawn at random below the bound (full jitter) or is the bound itself. The
    /// default is `true`.
    public var jitter: Bool

    /// Creates a backoff policy.
    public init(initialDelay: Duration = .seconds(1), maximumDelay: Duration = .seconds(300), jitter: Bool = true) {
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        self.jitter = jitter
    }

    /// The upper bound of the wait after the `attempt`-th failure in a row (1 for the first).
    public func bound(afterAttempt attempt: Int) -> Duration {
        var bound = initialDelay
        var doublings = max(0, attempt - 1)
        // Doubling past half the ceiling could overflow `Duration`; by then the ceiling is the answer.
        while doublings > 0 && bound < maximumDelay {
            if bound <= .zero { return .zero }
            if bound > maximumDelay / 2 { return maximumDelay }
            bound *= 2
            doublings -= 1
        }
        return min(bound, maximumDelay)
    }

    /// The wait after the `attempt`-th failure in a row, drawn with `generator` when jitter is on.
    public func delay(afterAttempt attempt: Int, using generator: inout some RandomNumberGenerator) -> Duration {
        let bound = bound(afterAttempt: attempt)
        guard jitter else { return bound }
        let milliseconds = max(0, bound.clampedMilliseconds)
        return .clampedMilliseconds(Int64.random(in: 0...milliseconds, using: &generator))
    }

    /// The wait after the `attempt`-th failure in a row when the server asked for `retryAfter`: at least
    /// that long (it knows best when it will be back), but never longer than ``maximumDelay``, so an absurd
    /// `Retry-After` (a year, a date far in the future) cannot park an attachment.
    public func delay(
        afterAttempt attempt: Int, retryAfter: Duration?, using generator: inout some RandomNumberGenerator
    ) -> Duration {
        let delay = delay(afterAttempt: attempt, using: &generator)
        guard let retryAfter else { return delay }
        return max(delay, min(retryAfter, maximumDelay))
    }

    /// A readable summary, for logs and errors.
    public var description: String {
        "RetryBackoff(initialDelay: \(initialDelay), maximumDelay: \(maximumDelay), jitter: \(jitter))"
    }
}
