import Foundation

/// An access key pair, with the session token and expiry of temporary credentials, that signs S3 requests.
///
/// Its `description`, `debugDescription` and mirror (what `dump` prints) show the access key id only, so logging,
/// interpolating or dumping a value never reveals the secret or the session token.
///
/// ```swift
/// let credentials = S3Credentials(accessKeyId: "AKIA…", secretAccessKey: secret)
/// ```
public struct S3Credentials: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// The access key id (`AKIA…`, say). It names the key; it is not secret.
    public var accessKeyId: String
    /// The secret access key, used only to derive signing keys. Never logged or put in an error message.
    public var secretAccessKey: String
    /// The session token of temporary credentials (from AWS STS, say), sent as `x-amz-security-token`, or
    /// `nil` for long-term keys. Treated as a secret, like ``secretAccessKey``.
    public var sessionToken: String?
    /// When temporary credentials stop working, or `nil` when they do not expire. ``S3RemoteStorage`` asks its
    /// provider for new ones a few minutes before this.
    public var expiration: Date?

    /// Creates credentials.
    ///
    /// - Parameters:
    ///   - accessKeyId: The access key id.
    ///   - secretAccessKey: The secret access key.
    ///   - sessionToken: The session token of temporary credentials. The default is `nil`.
    ///   - expiration: When temporary credentials expire. The default is `nil` (they do not).
    public init(accessKeyId: String, secretAccessKey: String, sessionToken: String? = nil, expiration: Date? = nil) {
        self.accessKeyId = accessKeyId
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
        self.expiration = expiration
    }

    /// The access key id and whether there is a session token; never the secrets.
    public var description: String {
        "S3Credentials(accessKeyId: \(accessKeyId), secretAccessKey: <redacted>"
            + (sessionToken == nil ? "" : ", sessionToken: <redacted>")
            + (expiration.map { ", expiration: \($0)" } ?? "") + ")"
    }

    /// The same text as ``description``: the secrets are redacted here too.
    public var debugDescription: String { description }

    /// A mirror with the access key id and the expiry only, so `dump` does not print the secrets.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "accessKeyId": accessKeyId, "hasSessionToken": sessionToken != nil, "expiration": expiration as Any,
            ],
            displayStyle: .struct)
    }
}
