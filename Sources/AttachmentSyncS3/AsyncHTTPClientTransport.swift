import AsyncHTTPClient
@_exported import AttachmentSyncHTTP
import Foundation

// `AttachmentSyncS3` is `AttachmentSyncHTTP` (the adapters, with no SwiftNIO) plus AsyncHTTPClient as their
// transport, the adapters' `httpClient:` initializers, and the backend's `PresignedURLIssuer`.

extension RemoteTransport {
    /// AsyncHTTPClient: the transport for servers and tools (SwiftNIO, its own connection pool).
    ///
    /// - Parameter client: The client to send with, which stays yours to configure and shut down, or `nil`
    ///   to have each adapter create one (redirects off, no decompression, the adapter's timeouts, up to 16
    ///   connections to a server) that the adapter's `shutdown()` shuts down. The default is `nil`.
    public static func asyncHTTPClient(_ client: HTTPClient? = nil) -> RemoteTransport {
        RemoteTransport { connectTimeout, requestTimeout in
            client.map { AsyncHTTPClientEngine(client: $0) }
                ?? AsyncHTTPClientEngine(connectTimeout: connectTimeout, requestTimeout: requestTimeout)
        }
    }
}

extension S3RemoteStorage {
    /// Creates an adapter that sends with AsyncHTTPClient.
    ///
    /// - Parameters:
    ///   - configuration: The server, bucket, credentials and options.
    ///   - httpClient: The client to send requests with, which stays yours to shut down, or `nil` to have the
    ///     adapter create one (with redirects off, the configured timeouts and up to 16 connections to the
    ///     server) that ``shutdown()`` shuts down. The default is `nil`.
    /// - Throws: `AttachmentError` with code `invalidConfiguration` naming the first option out
    ///   of range (a part size under 5 MiB, say).
    public convenience init(configuration: Configuration, httpClient: HTTPClient? = nil) throws {
        try self.init(configuration: configuration, transport: .asyncHTTPClient(httpClient))
    }
}

extension HTTPRemoteStorage {
    /// Creates an adapter that sends with AsyncHTTPClient.
    ///
    /// - Parameters:
    ///   - configuration: The base URL, headers and options.
    ///   - httpClient: The client to send requests with, which stays yours to shut down, or `nil` to have the
    ///     adapter create one (redirects off, the configured timeouts, up to 16 connections to the server) that
    ///     ``shutdown()`` shuts down. The default is `nil`.
    /// - Throws: `AttachmentError` with code `invalidConfiguration` for a base URL that is
    ///   not http(s) or has a query, or a timeout that is not positive.
    public convenience init(configuration: Configuration, httpClient: HTTPClient? = nil) throws {
        try self.init(configuration: configuration, transport: .asyncHTTPClient(httpClient))
    }
}

extension PresignedRemoteStorage {
    /// Creates an adapter that sends with AsyncHTTPClient.
    ///
    /// - Parameters:
    ///   - configuration: The authorising closure and options.
    ///   - httpClient: The client to send requests with, which stays yours to shut down, or `nil` to have the
    ///     adapter create one (up to 16 connections to the server) that ``shutdown()`` shuts down. The default
    ///     is `nil`.
    /// - Throws: `invalidConfiguration` naming the first option out of range.
    public convenience init(configuration: Configuration, httpClient: HTTPClient? = nil) throws {
        try self.init(configuration: configuration, transport: .asyncHTTPClient(httpClient))
    }
}

extension PresignedURLIssuer {
    /// Creates an issuer whose own checks are sent with AsyncHTTPClient, on a client of its own.
    ///
    /// - Parameters:
    ///   - storage: The S3 server, bucket, key prefix and credentials to sign with.
    ///   - maxObjectSize: The largest object a device may upload, 1 byte to 5 TiB.
    ///   - uploadCredentials: The credentials to sign uploads with, or `nil` for `storage.credentials`. The
    ///     default is `nil`.
    /// - Throws: `invalidConfiguration` naming the first option out of range.
    public init(
        storage: S3RemoteStorage.Configuration, maxObjectSize: Int64,
        uploadCredentials: S3RemoteStorage.CredentialsProvider? = nil
    ) throws {
        try self.init(
            storage: storage, maxObjectSize: maxObjectSize, uploadCredentials: uploadCredentials,
            transport: .asyncHTTPClient())
    }
}
