import Foundation

/// Thrown when something a test waits for does not happen before its deadline.
package struct DeadlineExceeded: Error, CustomStringConvertible {
    package let what: String
    package let seconds: Double

    package init(what: String, seconds: Double) {
        self.what = what
        self.seconds = seconds
    }

    package var description: String { "\(what) did not happen within \(seconds) s" }
}

/// Runs `body` and fails with ``DeadlineExceeded`` if it has not finished after `seconds`.
///
/// This is not a timing assumption: tests wait for the condition itself (a value in a stream, a row in a
/// table, a process exiting). The deadline only turns a bug that would hang the run into a failure with a
/// clear message, so it is generous.
package func withDeadline<T: Sendable>(
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
package struct StreamEnded: Error, CustomStringConvertible {
    package let what: String

    package init(what: String = "the expected element arrived") {
        self.what = what
    }

    package var description: String { "the stream ended before \(what)" }
}

/// The first element of `stream` that satisfies `predicate`, within `seconds`.
package func firstElement<Element: Sendable>(
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

extension AsyncThrowingStream where Element: Sendable {
    /// Reads the stream until an element satisfies `predicate` and returns it; throws when the stream ends
    /// first. Bounded by the stream's own length and, in callers, by ``withDeadline(seconds:_:_:)``.
    package func first(matching predicate: @Sendable (Element) -> Bool) async throws -> Element {
        for try await element in self where predicate(element) {
            return element
        }
        throw StreamEnded()
    }
}

/// A temporary folder, removed when `body` ends.
package func withTemporaryDirectory<T>(_ body: (URL) async throws -> T) async throws -> T {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent(
        "attachment-sync-tests-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: url) }
    return try await body(url)
}
