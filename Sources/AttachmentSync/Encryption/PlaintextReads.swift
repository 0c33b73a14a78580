/// Which stored files ``EncryptedRemoteStorage`` may read although they are not encrypted: the files an app
/// stored before it turned encryption on.
///
/// Whether a file is encrypted is never taken from the file alone: a storage that could serve plain bytes in
/// place of an encrypted file, and have them believed, could change any attachment. So the default refuses
/// every file that does not decrypt, and an app that turns encryption on with files already stored says
/// which may be plain. A file that starts like an encrypted one is always read as one (it decrypts, or it
/// is refused); only a file that does not is read as plain, and only when the policy allows it.
///
/// ```swift
/// // The app's rows mark the files saved since it turned encryption on ("e2e": true in their metadata,
/// // which WatchedAttachmentItem passes on); older files may be plain.
/// let remote = EncryptedRemoteStorage(
///     wrapping: s3, keys: keys,
///     plaintextReads: .allowed { attachment in attachment.metaData?.contains("\"e2e\":true") != true })
/// ```
///
/// Whatever the policy, a plain file is refused when the attachment's row carries a content SHA-256 the
/// bytes do not match; ``verifiedByContentHash`` also refuses one whose row carries none.
public struct PlaintextReads: Sendable {
    let allows: @Sendable (Attachment) -> Bool
    let requiresContentHash: Bool

    /// Every stored file must decrypt: a plain one is refused as an integrity mismatch. The default.
    public static let refused = PlaintextReads(allows: { _ in false }, requiresContentHash: false)

    /// A plain file is read when the attachment's row carries the content's SHA-256 and the file's bytes
    /// match it: a storage cannot swap in other bytes, but whoever writes the rows (the app's backend) can
    /// choose both the hash and the file. Rows without a hash must refer to encrypted files.
    public static let verifiedByContentHash = PlaintextReads(allows: { _ in true }, requiresContentHash: true)

    /// A plain file is read for the attachments `isPlain` accepts (decided from what the app trusts: a mark
    /// its rows carry in their metadata, a list of the ids stored before encryption was on); the rest must
    /// decrypt. A row
    /// that carries a content SHA-256 is still checked against it.
    public static func allowed(where isPlain: @escaping @Sendable (Attachment) -> Bool) -> PlaintextReads {
        PlaintextReads(allows: isPlain, requiresContentHash: false)
    }

    /// Whether a plain file is acceptable for `attachment` (before its bytes are checked).
    func accepts(_ attachment: Attachment) -> Bool {
        guard allows(attachment) else { return false }
        return !requiresContentHash || attachment.contentHash.map(FileStreaming.isSHA256) == true
    }
}
