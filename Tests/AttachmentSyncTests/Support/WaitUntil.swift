import Foundation
import TestSupport

/// Waits until `condition` holds, checking it again every few milliseconds; fails with
/// ``DeadlineExceeded`` after `seconds`. For conditions that no stream announces (a counter in a fake, a
/// file on disk); the deadline only turns a hang into a clear failure.
func waitUntil(
    _ what: String,
    seconds: Double = 30,
    _ condition: @escaping @Sendable () async throws -> Bool
) async throws {
    let clock = ContinuousClock()
    let deadline = clock.now.advanced(by: .seconds(seconds))
    while try await !condition() {
        guard clock.now < deadline else { throw DeadlineExceeded(what: what, seconds: seconds) }
        try await clock.sleep(for: .milliseconds(2))
    }
}

/// Awaits `event` (a fake's awaitable counter, say), failing with ``DeadlineExceeded`` if it has not
/// happened after `seconds`: no polling; the deadline only turns a hang into a clear failure.
func waitFor(_ what: String, seconds: Double = 30, _ event: @escaping @Sendable () async -> Void) async throws {
    try await withThrowingTaskGroup(of: Bool.self) { group in
        group.addTask {
            await event()
            return true
        }
        group.addTask {
            try? await ContinuousClock().sleep(for: .seconds(seconds))
            return false
        }
        let happened = try await group.next() ?? false
        group.cancelAll()
        if !happened { throw DeadlineExceeded(what: what, seconds: seconds) }
    }
}
