import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// One process at a time per attachments directory: an exclusive `flock(2)` on the directory itself (no
/// file is written for it), held from a queue's startup until it closes.
///
/// Two processes running queues on one directory would undo each other's work: one's startup removes
/// the file of a save the other has not committed yet, so that save's only copy is lost. The lock makes
/// the second queue fail to start with ``AttachmentError/Code-swift.struct/directoryInUse`` instead.
///
/// Within one process, queues on one directory share the lock (a count per directory): tests and apps
/// that reopen a queue in the same process are not locked out by one they dropped. The descriptor is opened
/// close-on-exec, so a child process never inherits it, and the kernel drops the lock when the process ends,
/// however it ends.
struct DirectoryLock: Sendable, Hashable {
    /// The directory's resolved path: the key of the process-wide table.
    let key: String

    private struct Held: Sendable {
        var descriptor: Int32
        var count: Int
    }

    /// The locks this process holds, by resolved directory path.
    private static let held = LockedValue<[String: Held]>([:])

    /// Takes the lock of `directory` (which exists), or shares it when this process holds it already;
    /// `nil` when the file system cannot lock it (some network volumes answer `flock` with `ENOLCK` or
    /// `EOPNOTSUPP`): the queue then runs without the guard rather than not at all.
    ///
    /// - Throws: ``AttachmentError/Code-swift.struct/directoryInUse`` when another process holds it.
    static func acquire(directory: URL) throws -> DirectoryLock? {
        let key = URL(fileURLWithPath: directory.path).resolvingSymlinksInPath().standardizedFileURL.path
        return try held.withLock { table in
            if var entry = table[key] {
                entry.count += 1
                table[key] = entry
                return DirectoryLock(key: key)
            }
            let descriptor = open(key, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard descriptor >= 0 else { return nil }
            var result: Int32
            repeat {
                result = flock(descriptor, LOCK_EX | LOCK_NB)
            } while result != 0 && errno == EINTR
            guard result == 0 else {
                let code = errno
                close(descriptor)
                if code == EWOULDBLOCK {
                    throw AttachmentError(
                        code: .directoryInUse,
                        message: "another process has an attachment queue open on \(key) (it holds the "
                            + "directory's lock); two queues on one directory would remove each other's files in "
                            + "progress",
                        path: key)
                }
                return nil
            }
            table[key] = Held(descriptor: descriptor, count: 1)
            return DirectoryLock(key: key)
        }
    }

    /// Gives the lock up; the last holder in the process closes the descriptor, which releases it.
    func release() {
        Self.held.withLock { table in
            guard var entry = table[key] else { return }
            entry.count -= 1
            if entry.count > 0 {
                table[key] = entry
            } else {
                table[key] = nil
                close(entry.descriptor)
            }
        }
    }
}
