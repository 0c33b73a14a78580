import Foundation

/// An error for tests to inject into fakes, such as ``InMemoryRemoteStorage``, and to recognise afterwards.
///
/// It carries only a ``message``; two failures with the same message are equal, so a test can check that
/// the very error it injected is the one that came out.
///
/// ```swift
/// let storage = InMemoryRemoteStorage()
/// let failure = InjectedFailure("server said 503")
/// await storage.failNext(.upload, with: failure)
/// await #expect(throws: failure) {
///     try await storage.uploadFile(data: Data([1]), attachment: attachment)
/// }
/// ```
public struct InjectedFailure: Error, Sendable, Hashable, CustomStringConvertible {
    /// What the failure says, for matching and for test output.
    public var message: String

    /// Creates a failure with the given message.
    ///
    /// ```swift
    /// let failure = InjectedFailure("disk full")
    /// ```
    ///
    /// - Parameter message: What the failure says. The default is `"injected failure"`.
    public init(_ message: String = "injected failure") {
        self.message = message
    }

    /// `InjectedFailure: ` followed by the ``message``, for logs and test output.
    ///
    /// ```swift
    /// #expect(InjectedFailure("boom").description == "InjectedFailure: boom")
    /// ```
    public var description: String {
        "InjectedFailure: \(message)"
    }
}
