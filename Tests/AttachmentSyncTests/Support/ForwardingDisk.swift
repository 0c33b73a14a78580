import Foundation

@testable import AttachmentSync

/// A test's file operations layer over the real one: every call goes to ``base`` unless the layer declares
/// its own, so each layer states only what it changes (a flush that fails, a call that waits, a log). A
/// batch flush (`synchronizeFiles`) keeps the protocol's default, one ``synchronizeFile(atPath:)`` of the
/// layer per file, as before, unless the layer declares it.
protocol ForwardingDisk: FileOperations {
    var base: SystemFileOperations { get }
}

extension ForwardingDisk {
    func info(atPath path: String) throws -> FileInfo? { try base.info(atPath: path) }
    func infoFollowingLinks(atPath path: String) throws -> FileInfo? { try base.infoFollowingLinks(atPath: path) }
    func contentsOfDirectory(atPath path: String) throws -> [String] { try base.contentsOfDirectory(atPath: path) }
    func openForReading(atPath path: String) throws -> FileHandle { try base.openForReading(atPath: path) }
    func openForWriting(atPath path: String, at offset: Int64?) throws -> any FileWriter {
        try base.openForWriting(atPath: path, at: offset)
    }
    func rename(_ source: String, to target: String) throws { try base.rename(source, to: target) }
    func link(_ source: String, to target: String) throws { try base.link(source, to: target) }
    func removeFile(atPath path: String) throws { try base.removeFile(atPath: path) }
    func removeTree(atPath path: String) throws { try base.removeTree(atPath: path) }
    func makeDirectory(atPath path: String) throws { try base.makeDirectory(atPath: path) }
    func setAttributes(_ attributes: LocalFileAttributes, atPath path: String) throws {
        try base.setAttributes(attributes, atPath: path)
    }
    func synchronizeFile(atPath path: String) throws { try base.synchronizeFile(atPath: path) }
    func synchronizeDirectory(atPath path: String) throws { try base.synchronizeDirectory(atPath: path) }
}
