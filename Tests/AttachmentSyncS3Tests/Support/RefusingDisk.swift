import AttachmentSync
import Foundation
import TestSupport

/// The real file layer, except that opening files for reading, or for writing, fails as a device does when
/// it cannot: a full disk (`ENOSPC`) for writes, protected data while the device is locked (`EPERM`) for
/// reads. Every other call goes to the real layer (``ForwardingDisk``).
struct RefusingDisk: ForwardingDisk {
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
}
