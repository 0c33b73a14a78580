import AttachmentSync
import Foundation

/// The real file layer, except that opening files for reading, or for writing, fails as a device does when
/// it cannot: a full disk (`ENOSPC`) for writes, protected data while the device is locked (`EPERM`) for
/// reads. Every other call goes to the real layer.
struct RefusingDisk: FileOperations {
    /// Which opens fail.
    var refusesReading = false
    var refusesWriting = false
    let base = SystemFileOperations()

    func openForReading(atPath path: String) throws -> FileHandle {
        guard !refusesReading else { throw SystemFileOperations.error(EPERM, "cannot open", path) }
        return try base.openForReading(atPath: path)
    }

    func openForWriting(atPath path: String, at offset: Int64?) throws -> any FileWriter {
        guard !refusesWriting else { throw SystemFileOperations.error(ENOSPC, "cannot write", path) }
        return try base.openForWriting(atPath: path, at: offset)
    }

    func info(atPath path: String) throws -> FileInfo? { try base.info(atPath: path) }
    func infoFollowingLinks(atPath path: String) throws -> FileInfo? { try base.infoFollowingLinks(atPath: path) }
    func contentsOfDirectory(atPath path: String) throws -> [String] { try base.contentsOfDirectory(atPath: path) }
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
