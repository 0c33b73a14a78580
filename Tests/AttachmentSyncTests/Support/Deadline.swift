import Foundation

/// Thrown when a condition a test waits for does not arrive before its deadline.
struct DeadlineExceeded: Error, CustomStringConvertible {
    let what: String
    let seconds: Double
    var description: String { "\(what) did not happen within \(seconds) s" }
}

/// Runs `body` and fails with ``DeadlineExceeded`` if it has not finished after `seconds`.
///
/// This is not a timing assumption: tests wait for the condition itself (a value in a stream, a row in a
/// table). The deadline only turns a bug that would hang the run into a failure with a clear message, so
/// it is generous.
func withDeadline<T: Sendable>(
    seconds: Double = 30,
    _ what: String,
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await ContinuousClock().sleep(for: .seconds(seconds))
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else {
            throw DeadlineExceeded(what: what, seconds: seconds)
        }
        return value
    }
}

extension AsyncThrowingStream where Element: Sendable {
    /// Reads the stream until an element satisfies `predicate` and returns it; throws when the stream ends
    /// first. Bounded by the stream's own length and, in callers, by ``withDeadline(seconds:_:_:)``.
    func first(matching predicate: @Sendable (Element) -> Bool) async throws -> Element {
        for try await element in self where predicate(element) {
            return element
        }
        throw StreamEnded()
    }
}

struct StreamEnded: Error, CustomStringConvertible {
    var description: String { "the stream ended before the expected element arrived" }
}
