import Foundation

extension AttachmentQueue {
    /// One new attachment for ``AttachmentQueue/saveFiles(_:updateHook:)``: its content, as bytes or as a
    /// file, and what the single `saveFile` calls take besides.
    ///
    /// ```swift
    /// let items = photos.map { AttachmentQueue.NewFile(fileURL: $0, mediaType: "image/jpeg") }
    /// ```
    public struct NewFile: Sendable {
        /// Where a new attachment's bytes come from.
        public enum Content: Sendable {
            /// Bytes in memory, as ``AttachmentQueue/saveFile(data:mediaType:fileExtension:metaData:id:updateHook:)``
            /// takes them.
            case data(Data)
            /// A file, copied (or with `moveFile`, taken over) as
            /// ``AttachmentQueue/saveFile(fileURL:mediaType:fileExtension:metaData:id:moveFile:updateHook:)`` does.
            case file(URL, moveFile: Bool)
        }

        /// The content.
        public var content: Content
        /// Its media type, stored with the record.
        public var mediaType: String?
        /// The extension the file is named with (`<id>.<ext>`), without the dot; for a file, `nil` takes the
        /// source file's extension.
        public var fileExtension: String?
        /// The app's own metadata.
        public var metaData: String?
        /// The attachment's id; `nil` for a new lowercase UUID.
        public var id: String?

        /// A new attachment holding `data`.
        ///
        /// - Parameters:
        ///   - data: The file's content.
        ///   - mediaType: Its media type.
        ///   - fileExtension: The extension the file is named with, without the dot.
        ///   - metaData: The app's own metadata. The default is `nil`.
        ///   - id: The attachment's id. The default is `nil`: a new lowercase UUID.
        public init(data: Data, mediaType: String?, fileExtension: String?, metaData: String? = nil, id: String? = nil)
        {
            self.content = .data(data)
            self.mediaType = mediaType
            self.fileExtension = fileExtension
            self.metaData = metaData
            self.id = id
        }

        /// A new attachment holding the file at `fileURL`.
        ///
        /// - Parameters:
        ///   - fileURL: The file to adopt.
        ///   - mediaType: Its media type.
        ///   - fileExtension: The extension the attachment's file is named with. The default is `nil`: the
        ///     source file's extension.
        ///   - metaData: The app's own metadata. The default is `nil`.
        ///   - id: The attachment's id. The default is `nil`: a new lowercase UUID.
        ///   - moveFile: Whether the attachment takes the file over (it is removed from `fileURL` once the
        ///     records are committed) instead of copying it. The default is `false`.
        public init(
            fileURL: URL, mediaType: String?, fileExtension: String? = nil, metaData: String? = nil,
            id: String? = nil, moveFile: Bool = false
        ) {
            self.content = .file(fileURL, moveFile: moveFile)
            self.mediaType = mediaType
            self.fileExtension = fileExtension
            self.metaData = metaData
            self.id = id
        }
    }
}
