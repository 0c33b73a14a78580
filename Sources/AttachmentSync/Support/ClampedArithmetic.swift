import Foundation

/// Conversions of durations and dates to integer milliseconds that saturate instead of trapping, for
/// values that come from outside (a server's `Retry-After`, a configured interval, an injected date):
/// no input may crash the process.
extension Duration {
    /// The duration in whole milliseconds (rounded down), saturated to `Int64`'s range.
    package var clampedMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        if overflow { return seconds < 0 ? .min : .max }
        return whole.addingClamped(attoseconds / 1_000_000_000_000_000)
    }

    /// The duration in whole nanoseconds (rounded down), saturated to `Int64`'s range.
    package var clampedNanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        return whole.addingClamped(attoseconds / 1_000_000_000)
    }

    /// A duration of `milliseconds`, which may be any `Int64`.
    package static func clampedMilliseconds(_ milliseconds: Int64) -> Duration {
        .seconds(milliseconds / 1000) + .milliseconds(milliseconds % 1000)
    }
}

extension Int64 {
    /// `self + other`, saturated to `Int64`'s range.
    package func addingClamped(_ other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        if overflow { return other < 0 ? .min : .max }
        return sum
    }

    /// `self - other`, saturated to `Int64`'s range.
    package func subtractingClamped(_ other: Int64) -> Int64 {
        let (difference, overflow) = subtractingReportingOverflow(other)
        if overflow { return other < 0 ? .max : .min }
        return difference
    }

    /// `value` rounded down to an integer, saturated to `Int64`'s range; NaN is 0.
    package init(clamping value: Double) {
        if value.isNaN {
            self = 0
        } else if value >= 9_223_372_036_854_775_807.0 {
            self = .max
        } else if value <= -9_223_372_036_854_775_808.0 {
            self = .min
        } else {
            self = Int64(value.rounded(.down))
        }
    }
}

/// Milliseconds since 1970 of `date`, saturated to `Int64`'s range.
func clampedMilliseconds(_ date: Date) -> Int64 {
    Int64(clamping: date.timeIntervalSince1970 * 1000)
}
