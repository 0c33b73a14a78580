import Foundation

/// Validation of every name that reaches the file system (ids, extensions, filenames, subdirectories), and
/// the names the queue gives its own files.
package enum FileName {
    /// `name` inside the folder at `directory`: the path `URL.appendingPathComponent` would give for a folder
    /// URL, without building URLs (which costs microseconds each on Linux, on every transfer).
    static func join(_ directory: String, _ name: String) -> String {
        directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }

    /// The longest name accepted, in UTF-8 bytes. File systems allow 255; the rest is room for the queue's
    /// temporary-file prefixes.
    static let maximumLength = 200

    /// Every temporary file the library writes starts with this; the queue removes leftovers at startup.
    package static let temporaryPrefix = ".attachment-sync-"

    /// Throws ``AttachmentError/Code-swift.struct/invalidName`` unless `name` can be used as one path
    /// component: not empty, at most ``maximumLength`` bytes, not `.` or `..`, and free of `/`, `\`, NUL and
    /// other control characters.
    static func validate(_ name: String, kind: String, attachmentId: String? = nil) throws {
        func fail(_ reason: String) -> AttachmentError {
            invalid(name, kind: kind, attachmentId: attachmentId, reason)
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

    /// Throws ``AttachmentError/Code-swift.struct/invalidName`` unless `id` can name a file (see
    /// ``validate(_:kind:attachmentId:)``) and is in Unicode Normalization Form C.
    ///
    /// Swift compares strings by canonical equivalence (`"caf\u{E9}" == "cafe\u{301}"`) and SQLite by
    /// their bytes, so two ids that differ only in their Unicode form would be one attachment to the queue
    /// and two to the table. Requiring NFC (what keyboards and most systems produce) makes the two agree.
    static func validateId(_ id: String) throws {
        try validate(id, kind: "attachment id", attachmentId: id)
        try validateNormalization(id)
    }

    /// Throws ``AttachmentError/Code-swift.struct/invalidName`` unless `id` is in Unicode NFC (see
    /// ``validateId(_:)``). ASCII is always NFC, so the common case costs a scan of the bytes.
    static func validateNormalization(_ id: String) throws {
        if id.utf8.allSatisfy({ $0 < 0x80 }) { return }
        let normalized = id.precomposedStringWithCanonicalMapping
        guard id.unicodeScalars.elementsEqual(normalized.unicodeScalars) else {
            throw invalid(
                id, kind: "attachment id", attachmentId: id,
                "it is not in Unicode Normalization Form C (NFC is \(String(reflecting: normalized))); ids that "
                    + "differ only in their Unicode form would be one attachment in Swift and two in SQLite")
        }
    }

    /// The ``AttachmentError/Code-swift.struct/invalidName`` error saying why `name`, of the given `kind` (an
    /// attachment id, a file extension…), cannot name a file.
    private static func invalid(
        _ name: String, kind: String, attachmentId: String?, _ reason: String
    ) -> AttachmentError {
        AttachmentError(
            code: .invalidName, message: "invalid \(kind) \(String(reflecting: name)): \(reason)",
            attachmentId: attachmentId, name: name)
    }

    /// `fileExtension` without a leading dot, validated; `nil` when it is `nil` or empty.
    static func normalizedExtension(_ fileExtension: String?, attachmentId: String?) throws -> String? {
        guard var ext = fileExtension else { return nil }
        if ext.hasPrefix(".") { ext.removeFirst() }
        guard !ext.isEmpty else { return nil }
        try validate(ext, kind: "file extension", attachmentId: attachmentId)
        return ext
    }

    /// The name of an attachment's local file: the id made safe for any file system
    /// (``safeName(_:keepingDots:)``), then `.` and the extension when there is one. A lowercase UUID stays
    /// as it is, so most files are named `<id>.<ext>`.
    ///
    /// The mapping is injective: the name starts with the safe form of the id, which has no `.`, so two
    /// ids never share a local file, even on a file system that ignores case or Unicode normalisation
    /// (APFS, HFS+) and whatever the extensions.
    ///
    /// - Throws: ``AttachmentError/Code-swift.struct/invalidName`` for an id or extension that cannot name
    ///   a file (see ``validate(_:kind:attachmentId:)``), or a name over ``maximumLength`` bytes.
    static func localName(id: String, fileExtension: String?) throws -> String {
        try validateId(id)
        let stem = safeName(id, keepingDots: false)
        let name = fileExtension.map { "\(stem).\($0)" } ?? stem
        try validate(name, kind: "local file name", attachmentId: id)
        return name
    }

    /// The name under which the remote file of an attachment saved on this device is stored, when the app
    /// gives no filename: `<id>.<ext>`, or `<id>` without an extension, as the PowerSync helpers name it (so
    /// another device's watch, which derives the same name from the id, finds it).
    ///
    /// - Throws: ``AttachmentError/Code-swift.struct/invalidName`` for an id with a `.`: then two ids could
    ///   derive the same name (`a.b` with extension `c`, and `a` with extension `b.c`).
    static func derivedFilename(id: String, fileExtension: String?) throws -> String {
        try validateId(id)
        guard !id.contains(".") else {
            throw invalid(
                id, kind: "attachment id", attachmentId: id,
                "an id whose file is named <id>.<extension> cannot contain \".\" (two ids could then share a "
                    + "file); give the item a filename, or use another id")
        }
        let name = fileExtension.map { "\(id).\($0)" } ?? id
        try validate(name, kind: "file name", attachmentId: id)
        return name
    }

    /// `text` as a file name that no other text maps to, even on a file system that ignores case or
    /// Unicode normalisation: ASCII lowercase letters, digits, `-` and `_` (and `.` when `keepingDots`) stay
    /// as they are; an ASCII uppercase letter becomes `^` and the letter in lowercase; every other byte of
    /// the UTF-8 form becomes `%` and two lowercase hex digits. The result is ASCII without uppercase, so no
    /// case folding or normalisation can merge two of them.
    ///
    /// A result longer than 150 bytes keeps its first 80 bytes and ends with `~` and the SHA-256 of `text`
    /// (`~` itself is always escaped, so such names never collide with the short ones).
    static func safeName(_ text: String, keepingDots: Bool) -> String {
        var escaped = ""
        escaped.reserveCapacity(text.utf8.count)
        let hexDigits = Array("0123456789abcdef")
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"),
                UInt8(ascii: "_"):
                escaped.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: ".") where keepingDots:
                escaped.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "A")...UInt8(ascii: "Z"):
                escaped.append("^")
                escaped.unicodeScalars.append(Unicode.Scalar(byte + 32))
            default:
                escaped.append("%")
                escaped.append(hexDigits[Int(byte >> 4)])
                escaped.append(hexDigits[Int(byte & 0x0f)])
            }
        }
        guard escaped.utf8.count > 150 else { return escaped }
        // Cut at a character boundary of the escaped form (escapes are ASCII, so any byte boundary is one).
        let head = String(escaped.utf8.prefix(80)) ?? ""
        return head + "~" + sha256(of: text)
    }

    /// The text ``safeName(_:keepingDots:)`` made `name` from, or `nil` when `name` is not one of its
    /// results or was shortened (it ends in `~` and a hash, so the text cannot be recovered).
    static func unescapedSafeName(_ name: String, keepingDots: Bool) -> String? {
        var bytes: [UInt8] = []
        var iterator = Array(name.utf8).makeIterator()
        func hexValue(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
            default: nil
            }
        }
        while let byte = iterator.next() {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"),
                UInt8(ascii: "_"):
                bytes.append(byte)
            case UInt8(ascii: ".") where keepingDots:
                bytes.append(byte)
            case UInt8(ascii: "^"):
                guard let letter = iterator.next(), (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(letter) else {
                    return nil
                }
                bytes.append(letter - 32)
            case UInt8(ascii: "%"):
                guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
                    return nil
                }
                bytes.append(high << 4 | low)
            default:
                return nil
            }
        }
        // Valid UTF-8 only: decoding repairs invalid bytes, so a repaired text has other bytes than `bytes`.
        // (`String(validating:as:)` says the same, but only from macOS 15 / iOS 18.)
        let text = String(decoding: bytes, as: UTF8.self)
        guard text.utf8.elementsEqual(bytes), safeName(text, keepingDots: keepingDots) == name else { return nil }
        return text
    }

    private static func sha256(of text: String) -> String {
        FileStreaming.sha256(Data(text.utf8))
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

    /// The name a download made by a background service is verified under before it is put in place (not the
    /// partial file's: a download asked for on demand may be writing that one). A leftover at startup.
    static func adoptingName(for localName: String) -> String { "\(temporaryPrefix)adopt-\(localName)" }

    /// Where a remote adapter may keep what it needs to resume the partial download `partialName` (an HTTP
    /// ETag, say); startup keeps it as long as the partial file.
    package static func resumeValidatorName(for partialName: String) -> String {
        "\(temporaryPrefix)etag-\(partialName)"
    }

    /// A name for the body a remote writes for a background upload (an encrypted copy): a temporary name of
    /// this process, marked as a hand-off's body.
    static func writtenBodyName() -> String { "\(temporaryPrefixOfThisProcess)handoff-\(UUID().uuidString)" }

    /// Whether `name` is one ``writtenBodyName()`` made (in any process).
    static func isWrittenBody(_ name: String) -> Bool {
        name.hasPrefix(temporaryPrefix) && name.contains(writtenBodyMark) && !name.contains("/")
    }

    /// What a written body's name holds after the temporary prefix (its process's ends with `-`).
    private static let writtenBodyMark = "-handoff-"

    /// A unique temporary name for an atomic write: ``temporaryPrefixOfThisProcess`` and a UUID.
    static func uniqueTemporaryName() -> String { "\(temporaryPrefixOfThisProcess)\(UUID().uuidString)" }

    /// How the temporary names this process makes begin: a token drawn once per process tells them from
    /// the leftovers of earlier ones, which startup's background check removes while this process's own
    /// may be in use.
    static let temporaryPrefixOfThisProcess = temporaryPrefix(ofProcess: ClaimStore.Holder.current.token)

    /// How the temporary names of the process whose claims carry `token` begin.
    static func temporaryPrefix(ofProcess token: String) -> String {
        "\(temporaryPrefix)tmp-\(token.prefix(8).lowercased())-"
    }

    /// The attachment file name that a library file name is about: `name` without the prefixes of a
    /// save's staging name, a partial download and its resume validator (`name` itself for other names).
    static func attachmentName(in name: String) -> String {
        var rest = Substring(name)
        for prefix in ["etag-", "download-", "save-"] {
            let full = temporaryPrefix + prefix
            if rest.hasPrefix(full) { rest = rest.dropFirst(full.count) }
        }
        return String(rest)
    }

    /// The part of a local file name made from the attachment's id (see ``localName(id:fileExtension:)``):
    /// everything before the first `.`.
    static func idStem(of localName: String) -> Substring {
        localName.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false).first ?? Substring(localName)
    }

    /// Whether `name` looks like a file the queue created for an attachment whose id it generated: a UUID,
    /// optionally followed by an extension. Only such files are removed when no record refers to them, so
    /// a queue pointed at the wrong folder deletes nothing of the user's.
    static func looksLikeGeneratedAttachment(_ name: String) -> Bool {
        let stem = name.split(separator: ".", maxSplits: 1).first.map(String.init) ?? name
        return stem.count == 36 && UUID(uuidString: stem) != nil
    }

}
