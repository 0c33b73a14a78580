/// The one timer that wakes the queue for a pass when the soonest retry time comes: replaced only by an
/// earlier one. A sub-machine of ``QueueStateMachine``: no I/O, no clock.
struct RetryTimer<Handle: Hashable & Sendable>: Sendable {
    /// A timer to make: wake the queue for a pass at `time` (milliseconds since 1970), `delay` from now.
    struct Wake: Sendable {
        var time: Int64
        var delay: Duration
        /// The timer it replaces, to cancel.
        var replacing: Handle?
    }

    /// The timer: its time, and its task once made.
    private var current: (time: Int64, handle: Handle?)?

    /// The time of the timer asked for, if any.
    var time: Int64? { current?.time }

    /// A wake at `time` is wanted: the timer to make, or `nil` when one as early runs already.
    mutating func schedule(at time: Int64, now: Int64) -> Wake? {
        if let current, current.time <= time { return nil }
        let replacing = current?.handle
        current = (time, nil)
        let delay = Duration.clampedMilliseconds(max(0, time.subtractingClamped(now)))
        return Wake(time: time, delay: delay, replacing: replacing)
    }

    /// Attaches the timer made for a ``Wake``, unless a newer one replaced it meanwhile.
    mutating func scheduled(at time: Int64, handle: Handle) {
        if current?.time == time, current?.handle == nil { current?.handle = handle }
    }

    /// The timer for `time` fired.
    mutating func fired(at time: Int64) {
        if current?.time == time { current = nil }
    }

    /// Forgets the timer; returns its task, to cancel.
    mutating func cancel() -> Handle? {
        defer { current = nil }
        return current?.handle
    }
}
