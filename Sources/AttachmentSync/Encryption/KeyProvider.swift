import Crypto
import Foundation

/// Where the keys of end-to-end encrypted attachments come from: the app's, never stored, logged or sent by
/// the library (see ``EncryptedRemoteStorage``).
///
/// Keys are 256-bit AES keys named by an id, which each encrypted file carries in the clear. New files are
/// encrypted with the key of ``currentKeyId()``; a file is read with the key its id names, so after a
/// rotation old files stay readable as long as their key is still provided.
///
/// ```swift
/// struct KeychainKeys: KeyProvider {
///     func currentKeyId() async throws -> String { "2026-11" }
///     func key(id: String) async throws -> SymmetricKey? { try Keychain.attachmentKey(named: id) }
/// }
/// ```
public protocol KeyProvider: Sendable {
    /// The id of the key new files are encrypted with.
    func currentKeyId() async throws -> String

    /// The key named `id`, or `nil` when this device does not have it (not yet, or no longer). A missing key
    /// makes the transfer wait (``AttachmentError/Code-swift.struct/keyUnavailable``); it never loses a file.
    func key(id: String) async throws -> SymmetricKey?
}

/// A ``KeyProvider`` holding its keys in memory: for tests, and for apps that fetch their keys themselves and
/// make a new provider when they change.
public struct StaticKeyProvider: KeyProvider {
    /// The keys, by id.
    public var keys: [String: SymmetricKey]
    /// The id of the key new files are encrypted with.
    public var current: String

    /// A provider of `keys`, encrypting new files with the key `current`.
    public init(keys: [String: SymmetricKey], current: String) {
        self.keys = keys
        self.current = current
    }

    /// ``current``.
    public func currentKeyId() async throws -> String { current }

    /// The key `id` of ``keys``.
    public func key(id: String) async throws -> SymmetricKey? { keys[id] }
}
