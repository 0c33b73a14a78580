import AttachmentSync
import Foundation

/// The HTTP client library an adapter sends its requests with.
///
/// `AttachmentSyncHTTP` has no transport of its own choosing built in: an app picks
/// `RemoteTransport.urlSession(…)` (the system's HTTP stack, no SwiftNIO in the app), and a server or tool
/// that links `AttachmentSyncS3` gets `RemoteTransport.asyncHTTPClient(…)` as well, which the adapters'
/// `init(configuration:httpClient:)` use.
///
/// Whatever the transport, an adapter behaves the same: it never follows a redirect, never decodes a
/// `Content-Encoding`, streams files both ways with bounded memory and reports progress, honours the
/// bandwidth cap and the minimum transfer rate, and classifies failures the same way.
///
/// ```swift
/// let storage = try PresignedRemoteStorage(
///     configuration: .init(authorize: { try await backend.authorize($0) }),
///     transport: .urlSession())
/// ```
public struct RemoteTransport: Sendable {
    /// Makes the engine of one adapter, given the adapter's connect and request timeouts.
    package let makeEngine: @Sendable (_ connectTimeout: Duration, _ requestTimeout: Duration) -> any HTTPEngine

    /// A transport whose engines `makeEngine` makes.
    package init(makeEngine: @escaping @Sendable (Duration, Duration) -> any HTTPEngine) {
        self.makeEngine = makeEngine
    }
}
