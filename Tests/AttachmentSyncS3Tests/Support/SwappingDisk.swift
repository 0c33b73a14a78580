import AttachmentSync
import Foundation

/// The real file layer, except that from the `swapAt`-th open for reading of `path` on, the handle given
/// is one of `replacement`'s: bytes that change between two reads of a file (the digest pass and the
/// send), as a bad disk, a bug or another process could make them. Every other call goes to the real layer.
struct SwappingDisk: FileOperations {
    let path: String
    let replacement: String
    let swapAt: Int
    /// How many times `path` was opened for reading.
    let opens = LockedValue(0)
    let base = SystemFileOperations()

    func openForReading(atPath path: String) throws -> FileHandle {
        guard path == self.path else { return try base.openForReading(atPath: path) }
        let count = opens.withLock { count -> Int in
            count += 1
            return count
        }
        return try base.openForReading(atPath: count >= swapAt ? replacement : path)
    }

    func openForWriting(atPath path: String, at offset: Int64?) throws -> any FileWriter {
        try base.openForWriting(atPath: path, at: offset)
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
