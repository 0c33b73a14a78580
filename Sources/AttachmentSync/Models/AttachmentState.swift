/// Where an attachment stands in its sync life cycle. Stored in the attachments table's `state` column as
/// the raw value.
public enum AttachmentState: Int, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// The app's rows refer to it but its file is not on this device yet; it will be downloaded.
    case queuedDownload = 0
    /// The file was saved on this device and will be uploaded.
    case queuedUpload = 1
    /// ``AttachmentQueue/deleteFile(attachmentId:updateHook:)`` removed it; the remote copy will be deleted,
    /// then the record.
    case queuedDelete = 2
    /// The file is on this device and in remote storage.
    case synced = 3
    /// No row refers to it any more. Its local file is kept as a cache until the archive is trimmed; if a
    /// row refers to it again meanwhile, it is restored without a download.
    case archived = 4

    /// A readable name, for logs.
    public var description: String {
        switch self {
        case .queuedDownload: "queuedDownload"
        case .queuedUpload: "queuedUpload"
        case .queuedDelete: "queuedDelete"
        case .synced: "synced"
        case .archived: "archived"
        }
    }
}
