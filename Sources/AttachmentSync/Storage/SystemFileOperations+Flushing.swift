import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

extension SystemFileOperations {
    package func synchronizeFile(atPath path: String) throws {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw Self.error(errno, "cannot open to flush", path) }
        defer { _ = systemClose(descriptor) }
        try flush(descriptor: descriptor, path: path)
    }

    /// More than one file is flushed with one flush that reaches stable storage, where the platform allows:
    ///
    /// - Apple platforms: each file is `fsync`ed (which only moves its data to the drive) and the last one
    ///   is flushed with `F_FULLFSYNC`, which drains the drive's whole cache: "data that had been fsync'd on
    ///   the same device before is guaranteed to be persisted when this call returns" (fcntl(2) on macOS).
    ///   So the batch costs one drain of the drive instead of one per file, and every file is on stable
    ///   storage when this returns, as the contract says. `F_BARRIERFSYNC` would be cheaper still, but it
    ///   only orders writes ("no assumption should be made on what has been persisted or not when this call
    ///   returns", same page): enough to keep a file ahead of the record that names it on the same drive,
    ///   not for `saveFiles`' promise that every file is on stable storage when it returns (a power loss
    ///   right after would lose photos the app was told are saved). SQLite's `fullfsync` likewise asks for
    ///   `F_FULLFSYNC` (and falls back to `fsync` where it fails), as done here: where the drive cannot be
    ///   drained, the last file is `fsync`ed like the others.
    /// - Linux (`syncfs(2)`): one flush of their volume: the kernel writes them out together and the journal
    ///   commits once, where a flush per file commits once per file (on ext4 here, 2,000 files of 64 KiB:
    ///   one `syncfs` took a fifth of the time of 2,000 `fsync`s). Since Linux 5.8 it reports write-back
    ///   errors as `fsync` does. Where `syncfs` fails as unsupported, each file is flushed.
    package func synchronizeFiles(atPaths paths: [String]) throws {
        if paths.count > 1, flushCalls.drainDrive != nil, let last = paths.last {
            for path in paths.dropLast() {
                let descriptor = open(path, O_RDONLY | O_CLOEXEC)
                guard descriptor >= 0 else { throw Self.error(errno, "cannot open to flush", path) }
                defer { _ = systemClose(descriptor) }
                try push(descriptor: descriptor, path: path)
            }
            try synchronizeFile(atPath: last)
            return
        }
        if paths.count > 1, let syncVolume = flushCalls.syncVolume {
            let descriptor = open(paths[0], O_RDONLY | O_CLOEXEC)
            guard descriptor >= 0 else { throw Self.error(errno, "cannot open to flush", paths[0]) }
            defer { _ = systemClose(descriptor) }
            if syncVolume(descriptor) == 0 { return }
            let code = errno
            if code != ENOSYS && code != EINVAL { throw Self.error(code, "cannot flush the volume of", paths[0]) }
        }
        for path in paths { try synchronizeFile(atPath: path) }
    }

    /// Drains the drive that holds `path` (``FlushCalls/drainDrive``, `F_FULLFSYNC` on Apple platforms): what
    /// was `fsync`ed to that drive before, a commit SQLite flushed say, is then on stable storage. Does
    /// nothing where the platform has no such call (Linux, whose `fsync` already waited for the device).
    /// Best effort, for after a commit SQLite has flushed itself: a file that cannot be opened or a volume
    /// that cannot be drained is left at that.
    package func drainDrive(holding path: String) {
        guard let drainDrive = flushCalls.drainDrive else { return }
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        _ = drainDrive(descriptor)
        _ = systemClose(descriptor)
    }

    package func synchronizeDirectory(atPath path: String) throws {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw Self.error(errno, "cannot open the folder to flush", path) }
        defer { _ = systemClose(descriptor) }
        try flush(descriptor: descriptor, path: path)
    }

    /// Flushes an open file or folder to stable storage; a failure is an error (the data may not be on disk).
    ///
    /// On Apple platforms `fsync` only hands the data to the drive, which may keep it in a volatile cache;
    /// `F_FULLFSYNC` (``FlushCalls/drainDrive``) asks the drive to write it out, as SQLite does with `PRAGMA
    /// fullfsync`. Where the file system does not support it (some network volumes), plain `fsync` is used.
    func flush(descriptor: Int32, path: String) throws {
        if let drainDrive = flushCalls.drainDrive, drainDrive(descriptor) == 0 { return }
        try push(descriptor: descriptor, path: path)
    }

    /// `fsync`s an open file or folder: on Linux that reaches stable storage, on Apple platforms the drive
    /// (see ``flush(descriptor:path:)``). A failure is an error.
    private func push(descriptor: Int32, path: String) throws {
        guard flushCalls.fsync(descriptor) == 0 else {
            let code = errno
            // Some file systems cannot flush a folder; that is no reason to fail.
            if code == EINVAL || code == ENOTSUP { return }
            throw Self.error(code, "cannot flush", path)
        }
    }
}
