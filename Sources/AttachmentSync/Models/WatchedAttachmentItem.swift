/// An attachment that the app's rows say should exist: the item a watched query maps each row to.
///
/// The queue compares the items of each emission with its attachments table: a new id is queued for
/// download, an id that is gone is archived.
///
/// ```swift
/// let items = try db.watch(
///     options: WatchOptions(
///         sql: "SELECT photo_id FROM checklists WHERE photo_id IS NOT NULL",
///         parameters: [],
///         mapper: { cursor in
///             try WatchedAttachmentItem(id: cursor.getString(name: "photo_id"), fileExtension: "jpg")
///         }
///     )
/// )
/// ```
public struct WatchedAttachmentItem: Sendable, Hashable {
    /// The attachment's id.
    public let id: String
    /// The file extension (without the dot) used to name the file when ``filename`` is `nil`.
    public let fileExtension: String?
    /// The file's name. When `nil`, the file is named `<id>.<fileExtension>`.
    public let filename: String?
    /// The app's own metadata for the attachment, stored in the record's `meta_data`.
    public let metaData: String?
    /// The attachment's media type (`image/jpeg`, say), stored in the record's `media_type`.
    public let mediaType: String?
    /// The SHA-256 of the content (64 hex digits), when the app's rows carry it: the downloaded file is
    /// checked against it. Rows synced from the device that saved the file can carry
    /// ``Attachment/contentHash``. The default is `nil`: the queue checks the hash that remote storage keeps
    /// with the file, when it keeps one.
    public let contentHash: String?
    /// The content's size in bytes, when the app's rows carry it: the downloaded file must have it, and
    /// progress has its total before the first byte arrives. The default is `nil`.
    public let size: Int64?

    /// Creates an item.
    ///
    /// - Parameters:
    ///   - id: The attachment's id.
    ///   - fileExtension: The extension that names the file `<id>.<fileExtension>` when `filename` is `nil`.
    ///   - filename: The file's name. The default is `nil`: `<id>.<fileExtension>`.
    ///   - metaData: The app's own metadata. The default is `nil`.
    ///   - mediaType: The media type. The default is `nil`.
    ///   - contentHash: The content's SHA-256 in hex, checked after download. The default is `nil`.
    ///   - size: The content's size in bytes, checked after download. The default is `nil`.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/invalidWatchedItem`` when
    ///   neither `fileExtension` nor `filename` is given. (A malformed hash or a negative size is reported
    ///   when the queue reconciles the item: it is skipped and logged.)
    public init(
        id: String,
        fileExtension: String? = nil,
        filename: String? = nil,
        metaData: String? = nil,
        mediaType: String? = nil,
        contentHash: String? = nil,
        size: Int64? = nil
    ) throws {
        guard fileExtension != nil || filename != nil else {
            throw AttachmentError(
                code: .invalidWatchedItem,
                message: "watched attachment \(String(reflecting: id)) needs a fileExtension or a filename",
                attachmentId: id
            )
        }
        self.id = id
        self.fileExtension = fileExtension
        self.filename = filename
        self.metaData = metaData
        self.mediaType = mediaType
        self.contentHash = contentHash
        self.size = size
    }

    /// The name of the attachment's file: ``filename`` when given, else `<id>.<fileExtension>`.
    public var resolvedFilename: String {
        if let filename { return filename }
        return "\(id).\(fileExtension ?? "")"
    }
}
