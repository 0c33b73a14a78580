import AttachmentSync
import Foundation

/// The authorisations ``PresignedRemoteStorage`` got from the app's closure, reused for equal operations
/// until `margin` before they expire. Concurrent requests for one operation share one call of the closure.
actor PresignedAuthorizations {
    typealias Authorize = @Sendable (PresignedOperation) async throws -> PresignedAuthorization

    /// The most authorisations kept; past it, expired ones are dropped, then the oldest.
    static let capacity = 512

    private let authorize: Authorize
    private let margin: TimeInterval
    private let now: @Sendable () -> Date
    private var cached: [PresignedOperation: (authorization: PresignedAuthorization, added: Int)] = [:]
    private var pending: [PresignedOperation: Task<PresignedAuthorization, any Error>] = [:]
    private var additions = 0
    /// How many times the closure was called, for tests.
    private(set) var calls = 0

    init(authorize: @escaping Authorize, margin: Duration, now: @escaping @Sendable () -> Date) {
        self.authorize = authorize
        let (seconds, attoseconds) = margin.components
        self.margin = TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
        self.now = now
    }

    /// The authorisation to send `operation` with: a cached one that is not about to expire, else a new one
    /// from the closure (always a new one when `renewing`, after the server refused the cached one).
    ///
    /// - Throws: What ``PresignedRemoteStorage`` documents for a failing closure: its `AttachmentError` as
    ///   it is, `accessDenied` for a ``PresignedRemoteStorage/Denied`` or an HTTP 401/403
    ///   ``RemoteHTTPError``, `remoteUnavailable` for anything else (the backend could not be reached), and
    ///   `remoteFailure` for an answer that is not an http(s) URL.
    func authorization(for operation: PresignedOperation, renewing: Bool) async throws -> PresignedAuthorization {
        if renewing {
            cached[operation] = nil
        } else if let entry = cached[operation] {
            if now().addingTimeInterval(margin) < entry.authorization.expiresAt { return entry.authorization }
            cached[operation] = nil
        }
        if let task = pending[operation] {
            return try await task.value
        }
        calls += 1
        let authorize = self.authorize
        let task = Task { try await Self.call(authorize, operation) }
        pending[operation] = task
        defer { pending[operation] = nil }
        let authorization = try await task.value
        store(authorization, for: operation)
        return authorization
    }

    /// Forgets the authorisation of `operation` (the server refused it).
    func invalidate(_ operation: PresignedOperation) {
        cached[operation] = nil
    }

    private func store(_ authorization: PresignedAuthorization, for operation: PresignedOperation) {
        if cached.count >= Self.capacity {
            let limit = now().addingTimeInterval(margin)
            cached = cached.filter { $0.value.authorization.expiresAt > limit }
            while cached.count >= Self.capacity, let oldest = cached.min(by: { $0.value.added < $1.value.added }) {
                cached[oldest.key] = nil
            }
        }
        additions += 1
        cached[operation] = (authorization, additions)
    }

    private static func call(_ authorize: Authorize, _ operation: PresignedOperation) async throws
        -> PresignedAuthorization
    {
        let authorization: PresignedAuthorization
        do {
            authorization = try await authorize(operation)
        } catch let error as AttachmentError {
            throw error
        } catch is CancellationError {
            throw CancellationError()
        } catch let denied as PresignedRemoteStorage.Denied {
            throw AttachmentError(
                code: .accessDenied,
                message: "the backend refused to authorise \(operation.kind.rawValue) of "
                    + "\(String(reflecting: operation.filename)): \(denied.reason)",
                name: operation.filename, underlying: denied)
        } catch let http as RemoteHTTPError where http.statusCode == 401 || http.statusCode == 403 {
            throw AttachmentError(
                code: .accessDenied,
                message: "the backend refused to authorise \(operation.kind.rawValue) of "
                    + "\(String(reflecting: operation.filename)): \(http)",
                name: operation.filename, underlying: http)
        } catch {
            throw AttachmentError(
                code: .remoteUnavailable,
                message: "asking the backend to authorise \(operation.kind.rawValue) of "
                    + "\(String(reflecting: operation.filename)) failed; it will be asked again later",
                name: operation.filename, underlying: error)
        }
        guard HTTPURL.isServer(authorization.url) else {
            throw AttachmentError(
                code: .remoteFailure,
                message: "the backend authorised \(operation.kind.rawValue) of "
                    + "\(String(reflecting: operation.filename)) with something that is not an http(s) URL",
                name: operation.filename)
        }
        return authorization
    }
}
