import Foundation

/// Validation of every name that reaches the file system (ids, extensions, filenames, subdirectories), and
/// the names the queue gives its own files.
enum FileName {
    /// The longest name accepted, in UTF-8 bytes. File systems allow 255; the rest is room for the queue's
    /// temporary-file prefixes.
    static let maximumLength = 200

    /// Every temporary file the library writes starts with this; the queue removes leftovers at startup.
    static let temporaryPrefix = ".attachment-sync-"

    /// Throws ``AttachmentError/Code-swift.struct/invalidName`` unless `name` can be used as one path
    /// component: not empty, at most ``maximumLength`` bytes, not `.` or `..`, and free of `/`, `\`, NUL and
    /// other control characters.
    static func validate(_ name: String, kind: String, attachmentId: String? = nil) throws {
        func fail(_ reason: String) -> AttachmentError {
            AttachmentError(
                code: .invalidName,
                message: "invalid \(kind) \(String(reflecting: name)): \(reason)",
                attachmentId: attachmentId,
                name: name
            )
        }
        guard !name.isEmpty else { throw fail("it is empty") }
        guard name.utf8.count <= maximumLength else {
            throw fail("it is longer than \(maximumLength) bytes")
        }
        guard name != "." && name != ".." else { throw fail("it names a directory") }
        for scalar in name.unicodeScalars {
            if scalar == "/" || scalar == "\\" { throw fail("path separators are not allowed") }
            if scalar.value < 0x20 || scalar.value == 0x7F { throw fail("control characters are not allowed") }
        }
        if name.hasPrefix(temporaryPrefix) {
            throw fail("the \(temporaryPrefix) prefix is reserved for temporary files")
        }
    }

    /// `fileExtension` without a leading dot, validated; `nil` when it is `nil` or empty.
    static func normalizedExtension(_ fileExtension: String?, attachmentId: String?) throws -> String? {
        guard var ext = fileExtension else { return nil }
        if ext.hasPrefix(".") { ext.removeFirst() }
        guard !ext.isEmpty else { return nil }
        try validate(ext, kind: "file extension", attachmentId: attachmentId)
        return ext
    }

    /// The name of an attachment's local file: `<id>.<ext>`, or `<id>` without an extension. Ids are unique,
    /// so two attachments never share a local file, whatever their filenames.
    static func localName(id: String, fileExtension: String?) throws -> String {
        try validate(id, kind: "attachment id", attachmentId: id)
        let name = fileExtension.map { "\(id).\($0)" } ?? id
        try validate(name, kind: "local file name", attachmentId: id)
        return name
    }

    /// The extension an attachment's local file gets: the given one, else the filename's.
    static func localExtension(fileExtension: String?, filename: String) -> String? {
        if let fileExtension, !fileExtension.isEmpty { return fileExtension }
        let fromName = (filename as NSString).pathExtension
        return fromName.isEmpty ? nil : fromName
    }

    /// Where `saveFile` stages a file before its record commits.
    static func savingName(for localName: String) -> String { "\(temporaryPrefix)save-\(localName)" }

    /// Where a download is written before it is moved into place.
    static func downloadingName(for localName: String) -> String { "\(temporaryPrefix)download-\(localName)" }

    /// A unique temporary name for an atomic write.
    static func uniqueTemporaryName() -> String { "\(temporaryPrefix)tmp-\(UUID().uuidString)" }

    /// Whether `name` looks like a file the queue created for an attachment whose id it generated: a UUID,
    /// optionally followed by an extension. Only such files are removed when no record refers to them, so
    /// a queue pointed at the wrong folder deletes nothing of the user's.
    static func looksLikeGeneratedAttachment(_ name: String) -> Bool {
        let stem = name.split(separator: ".", maxSplits: 1).first.map(String.init) ?? name
        return stem.count == 36 && UUID(uuidString: stem) != nil
    }
}
