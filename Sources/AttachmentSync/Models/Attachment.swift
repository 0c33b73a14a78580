import Foundation

/// One attachment's record: what the attachments table holds about a file.
///
/// Apps read these from ``AttachmentQueue/attachment(id:)`` and ``AttachmentQueue/saveFile(data:mediaType:fileExtension:metaData:id:updateHook:)``;
/// remote storage adapters receive them and usually need only ``filename``.
public struct Attachment: Sendable, Hashable, Identifiable {
    /// The attachment's id, the value the app's rows refer to.
    public let id: String
    /// The file's name, and its key in remote storage.
    public let filename: String
    /// Where the attachment stands in its sync life cycle.
    public let state: AttachmentState
    /// When the record last changed, in milliseconds since 1970.
    public let timestamp: Int64
    /// Whether the file has ever reached (or come from) remote storage.
    public let hasSynced: Bool
    /// The absolute path of the local file, or `nil` when the file is not on this device. The table stores
    /// the path relative to the attachments directory; the queue resolves it, so it stays valid when an
    /// app's sandbox path changes between launches.
    public let localUri: String?
    /// The media type (`image/jpeg`, say), when known.
    public let mediaType: String?
    /// The file's size in bytes, when known.
    public let size: Int64?
    /// The app's own metadata (JSON, say), when given.
    public let metaData: String?
    /// The SHA-256 of the content (lowercase hex), when known. Downloads are verified against it.
    public let contentHash: String?
    /// Whether the content is fetched only when asked for (``AttachmentQueue/download(attachmentId:)``),
    /// as the queue's ``AttachmentQueue/Configuration/downloadPolicy`` decided when the record was made.
    public let isOnDemand: Bool
    /// Whether the local content is exempt from eviction under
    /// ``AttachmentQueue/Configuration/maxCacheBytes`` (see ``AttachmentQueue/pin(attachmentId:)``).
    public let isPinned: Bool
    /// The transfer the queue gave up on, as the queued state it was in (``AttachmentState/queuedUpload``,
    /// ``AttachmentState/queuedDownload`` or ``AttachmentState/queuedDelete``), or `nil`.
    ///
    /// A transfer is given up after ``AttachmentQueue/Configuration/maxAttempts`` failures, or when the
    /// ``SyncErrorHandler`` says so; the record is then ``AttachmentState/archived`` and stays so until
    /// ``AttachmentQueue/retry(attachmentId:)`` (or ``AttachmentQueue/retryAll()``) queues it again, or a row
    /// refers to it anew after none did. A given-up upload keeps its local file: see ``isLocalOnly``.
    public let givenUp: AttachmentState?

    /// Whether the content is on this device and has never reached remote storage: the local file is the
    /// only copy. Such content is never evicted or purged, and an archived one is uploaded again when a
    /// row refers to it.
    public var isLocalOnly: Bool { localUri != nil && !hasSynced }

    /// Whether the content is on this device, at ``localUri``. An on-demand attachment that was never
    /// fetched, or whose content was purged, has a record but no content.
    public var contentAvailable: Bool { localUri != nil }

    /// Creates a record.
    public init(
        id: String,
        filename: String,
        state: AttachmentState,
        timestamp: Int64 = 0,
        hasSynced: Bool = false,
        localUri: String? = nil,
        mediaType: String? = nil,
        size: Int64? = nil,
        metaData: String? = nil,
        contentHash: String? = nil,
        isOnDemand: Bool = false,
        isPinned: Bool = false,
        givenUp: AttachmentState? = nil
    ) {
        self.id = id
        self.filename = filename
        self.state = state
        self.timestamp = timestamp
        self.hasSynced = hasSynced
        self.localUri = localUri
        self.mediaType = mediaType
        self.size = size
        self.metaData = metaData
        self.contentHash = contentHash
        self.isOnDemand = isOnDemand
        self.isPinned = isPinned
        self.givenUp = givenUp
    }

    /// A copy with the given fields replaced.
    public func with(
        filename: String? = nil,
        state: AttachmentState? = nil,
        timestamp: Int64? = nil,
        hasSynced: Bool? = nil,
        localUri: String?? = nil,
        mediaType: String?? = nil,
        size: Int64?? = nil,
        metaData: String?? = nil,
        contentHash: String?? = nil
    ) -> Attachment {
        Attachment(
            id: id,
            filename: filename ?? self.filename,
            state: state ?? self.state,
            timestamp: timestamp ?? self.timestamp,
            hasSynced: hasSynced ?? self.hasSynced,
            localUri: localUri ?? self.localUri,
            mediaType: mediaType ?? self.mediaType,
            size: size ?? self.size,
            metaData: metaData ?? self.metaData,
            contentHash: contentHash ?? self.contentHash,
            isOnDemand: isOnDemand,
            isPinned: isPinned,
            givenUp: givenUp
        )
    }
}
