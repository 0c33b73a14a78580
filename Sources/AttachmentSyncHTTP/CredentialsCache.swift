import AttachmentSync
import Foundation

/// Hands out the credentials to sign with: fixed ones as they are, the environment's as they are now, and a
/// custom provider's from a cache that is refreshed shortly before they expire. Concurrent callers share one
/// call to the provider.
actor CredentialsCache {
    private let provider: S3RemoteStorage.CredentialsProvider
    private let refreshMargin: TimeInterval
    private let now: @Sendable () -> Date
    private var cached: S3Credentials?
    private var refreshing: Task<S3Credentials, any Error>?
    /// How many times the custom provider has been called, for tests.
    private(set) var providerCalls = 0

    init(
        provider: S3RemoteStorage.CredentialsProvider, refreshMargin: Duration,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.provider = provider
        let (seconds, attoseconds) = refreshMargin.components
        self.refreshMargin = TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
        self.now = now
    }

    /// The credentials to sign the next request with.
    func current() async throws -> S3Credentials {
        switch provider {
        case .static(let accessKeyId, let secretAccessKey, let sessionToken):
            return S3Credentials(accessKeyId: accessKeyId, secretAccessKey: secretAccessKey, sessionToken: sessionToken)
        case .environment:
            return try Self.fromEnvironment(ProcessInfo.processInfo.environment)
        case .custom(let fetch):
            if let cached, !needsRefresh(cached) {
                return cached
            }
            if let refreshing {
                return try await refreshing.value
            }
            providerCalls += 1
            let task = Task {
                do {
                    return try await fetch()
                } catch {
                    throw AttachmentError(
                        code: .accessDenied, message: "the S3 credentials provider failed", underlying: error)
                }
            }
            refreshing = task
            defer { refreshing = nil }
            let fresh = try await task.value
            cached = fresh
            return fresh
        }
    }

    /// Forgets cached credentials after the server refused them, so the next request asks the provider again.
    func invalidate() {
        cached = nil
    }

    private func needsRefresh(_ credentials: S3Credentials) -> Bool {
        guard let expiration = credentials.expiration else { return false }
        return now().addingTimeInterval(refreshMargin) >= expiration
    }

    /// Reads `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`.
    static func fromEnvironment(_ environment: [String: String]) throws -> S3Credentials {
        guard let accessKeyId = environment["AWS_ACCESS_KEY_ID"], !accessKeyId.isEmpty,
            let secretAccessKey = environment["AWS_SECRET_ACCESS_KEY"], !secretAccessKey.isEmpty
        else {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set for S3 credentials from the "
                    + "environment", name: "credentials")
        }
        let token = environment["AWS_SESSION_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        return S3Credentials(accessKeyId: accessKeyId, secretAccessKey: secretAccessKey, sessionToken: token)
    }
}
