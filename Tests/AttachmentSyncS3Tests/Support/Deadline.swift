import Foundation

/// Thrown when something a test waits for does not happen before its deadline.
struct DeadlineExceeded: Error, CustomStringConvertible {
    let what: String
    let seconds: Double
    var description: String { "\(what) did not happen within \(seconds) s" }
}

/// Runs `body` and fails with ``DeadlineExceeded`` if it has not finished after `seconds`.
///
/// Tests wait for the condition itself (a state in the table, an event, a progress update); the deadline
/// only turns a hang into a failure with a clear message, so it is generous.
func withDeadline<T: Sendable>(
    seconds: Double = 60,
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

/// Thrown when a stream ends before the element a test waits for.
struct StreamEnded: Error, CustomStringConvertible {
    let what: String
    var description: String { "the stream ended before \(what)" }
}

/// The first element of `stream` that satisfies `predicate`, within `seconds`.
func firstElement<Element: Sendable>(
    _ what: String,
    in stream: AsyncStream<Element>,
    seconds: Double = 60,
    where predicate: @escaping @Sendable (Element) -> Bool
) async throws -> Element {
    try await withDeadline(seconds: seconds, what) {
        for await element in stream where predicate(element) {
            return element
        }
        throw StreamEnded(what: what)
    }
}
