import AttachmentSync
import Foundation

/// A test's file operations layer over the real one: every call goes to ``base`` unless the layer declares
/// its own, so each layer states only what it changes (a flush that fails, a call that waits, a log). A
/// batch flush (`synchronizeFiles`) keeps the protocol's default, one ``synchronizeFile(atPath:)`` of the
/// layer per file, as before, unless the layer declares it.
package protocol ForwardingDisk: FileOperations {
    var base: SystemFileOperations { get }
}

extension ForwardingDisk {
    package func info(atPath path: String) throws -> FileInfo? { try base.info(atPath: path) }
    package func infoFollowingLinks(atPath path: String) throws -> FileInfo? {
        try base.infoFollowingLinks(atPath: path)
    }
    package func contentsOfDirectory(atPath path: String) throws -> [String] {
        try base.contentsOfDirectory(atPath: path)
    }
    package func openForReading(atPath path: String) throws -> FileHandle { try base.openForReading(atPath: path) }
    package func openForWriting(atPath path: String, at offset: Int64?) throws -> any FileWriter {
        try base.openForWriting(atPath: path, at: offset)
    }
    package func rename(_ source: String, to target: String) throws { try base.rename(source, to: target) }
    package func link(_ source: String, to target: String) throws { try base.link(source, to: target) }
    package func removeFile(atPath path: String) throws { try base.removeFile(atPath: path) }
    package func removeTree(atPath path: String) throws { try base.removeTree(atPath: path) }
    package func makeDirectory(atPath path: String) throws { try base.makeDirectory(atPath: path) }
    package func setAttributes(_ attributes: LocalFileAttributes, atPath path: String) throws {
        try base.setAttributes(attributes, atPath: path)
    }
    package func synchronizeFile(atPath path: String) throws { try base.synchronizeFile(atPath: path) }
    package func synchronizeDirectory(atPath path: String) throws { try base.synchronizeDirectory(atPath: path) }
}
