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

    /// A transfer failed for the `attempt`-th time in a row (1 for the first failure). Return `true` to
    /// retry it (after the queue's backoff delay), `false` to archive the attachment.
    ///
    /// The default implementation calls ``onUploadError(attachment:error:)``,
    /// ``onDownloadError(attachment:error:)`` or ``onDeleteError(attachment:error:)`` by the
    /// attachment's state, so handlers written for those keep working; implement this one to decide by
    /// the attempt count.
    func shouldRetry(attachment: Attachment, error: Error, attempt: Int) async -> Bool

    /// An upload failed. Return `true` to retry it, `false` to archive the attachment.
    func onUploadError(attachment: Attachment, error: Error) async -> Bool

    /// A remote delete failed. Return `true` to retry it, `false` to archive the attachment (its remote
    /// copy then stays where it is).
    func onDeleteError(attachment: Attachment, error: Error) async -> Bool
}

extension SyncErrorHandler {
    /// Calls the seed method for the attachment's state (upload, download or delete).
    public func shouldRetry(attachment: Attachment, error: Error, attempt: Int) async -> Bool {
        switch attachment.state {
        case .queuedUpload: await onUploadError(attachment: attachment, error: error)
        case .queuedDownload: await onDownloadError(attachment: attachment, error: error)
        case .queuedDelete: await onDeleteError(attachment: attachment, error: error)
        case .synced, .archived: true
        }
    }
}
