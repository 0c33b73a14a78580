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

extension RemoteTransport {
    /// Foundation's `URLSession`: the system's HTTP stack on Apple platforms (no SwiftNIO in the app), and
    /// FoundationNetworking (libcurl) on Linux.
    ///
    /// Each adapter gets a session of its own (ephemeral: no cache, no cookies, no stored credentials),
    /// whose idle timeout is the longer of the adapter's connect and request timeouts. What it cannot do
    /// that AsyncHTTPClient does:
    /// - A response sent with a `Content-Encoding` (an object stored gzip-compressed) cannot be read as
    ///   stored: `URLSession` decodes it. Such a download fails with `remoteFailure` rather than deliver
    ///   other bytes.
    /// - On Linux (FoundationNetworking), an upload's bandwidth cap is charged after each request's bytes
    ///   went rather than while they go (the cap holds on average across transfers, not within one), and
    ///   nothing slows a download's network side: FoundationNetworking queues every received chunk for the
    ///   delegate with no back-pressure, so a fast download can hold hundreds of MiB (measured: a 1 GiB
    ///   download in parallel ranges peaked at 625–827 MiB). On Linux, prefer AsyncHTTPClient.
    ///
    /// - Parameter maximumConnectionsPerHost: The most connections an adapter opens to one server. The
    ///   default is 16.
    public static func urlSession(maximumConnectionsPerHost: Int = 16) -> RemoteTransport {
        RemoteTransport { connectTimeout, requestTimeout in
            URLSessionEngine(
                connectTimeout: connectTimeout, requestTimeout: requestTimeout,
                maximumConnectionsPerHost: maximumConnectionsPerHost)
        }
    }
}
