import Foundation

/// The queue's one source of calendar time, for what it stores (record timestamps, retry times, last use):
/// ``AttachmentQueue/Configuration/currentDate`` when the app sets it, else a date derived from the
/// injected ``AttachmentQueue/Configuration/clock`` (the system date when the queue was made, advanced as
/// that clock advances). So a test that drives a manual clock moves stored times with it, and sleeps and
/// dates never disagree.
struct WallClock: Sendable {
    private let current: @Sendable () -> Date

    /// A wall clock that reads `date`.
    init(date: @escaping @Sendable () -> Date) {
        current = date
    }

    /// A wall clock that follows `clock` from the system date now.
    init(following clock: any Clock<Duration>) {
        let anchor = Date()
        let elapsed = Stopwatch.start(clock)
        current = { anchor.addingTimeInterval(elapsed().seconds) }
    }

    /// The current date.
    func date() -> Date { current() }

    /// The current time in milliseconds since 1970 (clamped to `Int64`).
    func milliseconds() -> Int64 { clampedMilliseconds(current()) }

    /// The date of a stored time in milliseconds since 1970.
    static func date(milliseconds: Int64) -> Date {
        Date(timeIntervalSince1970: Double(milliseconds) / 1000)
    }
}

/// Measures time elapsed on any clock since it was started.
enum Stopwatch {
    /// A function giving the time elapsed on `clock` since this call.
    static func start(_ clock: any Clock<Duration>) -> @Sendable () -> Duration {
        start(opened: clock)
    }

    private static func start<C: Clock<Duration>>(opened clock: C) -> @Sendable () -> Duration {
        let start = clock.now
        return { start.duration(to: clock.now) }
    }
}

extension Duration {
    /// The duration in seconds, as a floating-point number.
    var seconds: Double {
        let parts = components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }
}
