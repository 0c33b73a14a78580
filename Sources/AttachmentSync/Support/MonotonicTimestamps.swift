import Foundation

/// Record timestamps: milliseconds since 1970 that never repeat or go backwards within a process, so
/// "oldest first" is a total order even for records changed in the same millisecond.
final class MonotonicTimestamps: Sendable {
    private let last = LockedValue<Int64>(0)
    private let wallClock: WallClock

    init(wallClock: WallClock) {
        self.wallClock = wallClock
    }

    func next() -> Int64 {
        let now = wallClock.milliseconds()
        return last.withLock { last in
            last = max(now, last.addingClamped(1))
            return last
        }
    }
}
