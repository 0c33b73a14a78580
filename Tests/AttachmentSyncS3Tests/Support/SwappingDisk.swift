import AttachmentSync
import Foundation
import TestSupport

/// The real file layer, except that from the `swapAt`-th open for reading of `path` on, the handle given
/// is one of `replacement`'s: bytes that change between two reads of a file (the digest pass and the
/// send), as a bad disk, a bug or another process could make them. Every other call goes to the real
/// layer (``ForwardingDisk``).
struct SwappingDisk: ForwardingDisk {
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
}
