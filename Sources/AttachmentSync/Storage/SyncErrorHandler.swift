/// Decides what happens to an attachment whose transfer failed: retry it (`true`) or archive it (`false`).
///
/// Without a handler the queue retries every failed transfer at the next sync trigger. A handler lets an
/// app give up on errors that will never heal (a file the server rejects, say):
///
/// ```swift
/// struct GiveUpOnMissingFiles: SyncErrorHandler {
///     func onDownloadError(attachment: Attachment, error: Error) async -> Bool {
///         (error as? AttachmentError)?.code != .remoteNotFound
///     }
///     func onUploadError(attachment: Attachment, error: Error) async -> Bool { true }
///     func onDeleteError(attachment: Attachment, error: Error) async -> Bool { true }
/// }
/// ```
///
/// Cancellation (``AttachmentQueue/stopSync()``, ``AttachmentQueue/close()``) is not a failure and is never
/// reported here.
public protocol SyncErrorHandler: Sendable {
    /// A download failed. Return `true` to retry it, `false` to archive the attachment.
    func onDownloadError(attachment: Attachment, error: Error) async -> Bool

    /// An upload failed. Return `true` to retry it, `false` to archive the attachment.
    func onUploadError(attachment: Attachment, error: Error) async -> Bool

    /// A remote delete failed. Return `true` to retry it, `false` to archive the attachment (its remote
    /// copy then stays where it is).
    func onDeleteError(attachment: Attachment, error: Error) async -> Bool
}
