#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The system calls that move a file's writes to stable storage, as values, so that the rules built on
/// them (``SystemFileOperations``' flushes) run, and are tested, on every platform whichever calls it has.
/// Each returns 0, or -1 with `errno` set.
package struct FlushCalls: Sendable {
    /// `fsync(2)`.
    package var fsync: @Sendable (Int32) -> Int32
    /// The call that makes the drive write out its whole volatile cache, everything `fsync`ed on the device
    /// before included, where `fsync` does not (`F_FULLFSYNC` on Apple platforms); `nil` where `fsync`
    /// itself reaches stable storage.
    package var drainDrive: (@Sendable (Int32) -> Int32)?
    /// `syncfs(2)`: flushes the whole volume of the descriptor's file; `nil` where there is none.
    package var syncVolume: (@Sendable (Int32) -> Int32)?

    package init(
        fsync: @escaping @Sendable (Int32) -> Int32, drainDrive: (@Sendable (Int32) -> Int32)?,
        syncVolume: (@Sendable (Int32) -> Int32)?
    ) {
        self.fsync = fsync
        self.drainDrive = drainDrive
        self.syncVolume = syncVolume
    }

    /// This platform's calls.
    ///
    /// - Apple: `fsync(2)` moves the data from the host to the drive, which may keep it in a volatile cache
    ///   and write it later, and out of order (fsync(2) on macOS). `fcntl(F_FULLFSYNC)` does what `fsync`
    ///   does, then has the drive write out everything it holds: "As this drains the entire queue of the
    ///   device and acts as a barrier, data that had been fsync'd on the same device before is guaranteed to
    ///   be persisted when this call returns" (fcntl(2) on macOS). No `syncfs`.
    /// - Linux: `fsync(2)` returns once the device has the data on stable storage (its cache flushed);
    ///   `syncfs(2)` does that for a whole volume (glibc has it; Swift's Glibc module does not declare it,
    ///   so it is looked up by name). It is used only on a kernel that reports write-back errors from it
    ///   (``syncfsReportsErrors(kernelRelease:)``).
    package static let system: FlushCalls = {
        #if canImport(Darwin)
            FlushCalls(fsync: { systemFsync($0) }, drainDrive: { fcntl($0, F_FULLFSYNC) }, syncVolume: nil)
        #else
            FlushCalls(fsync: { systemFsync($0) }, drainDrive: nil, syncVolume: syncfs)
        #endif
    }()

    #if !canImport(Darwin)
        /// glibc's `syncfs`, or `nil` when the C library lacks it or the kernel does not report errors from it.
        private static let syncfs: (@Sendable (Int32) -> Int32)? = {
            var name = utsname()
            guard uname(&name) == 0 else { return nil }
            let release = withUnsafeBytes(of: &name.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard syncfsReportsErrors(kernelRelease: release),
                let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "syncfs")
            else { return nil }
            let syncfs = unsafeBitCast(symbol, to: (@convention(c) (Int32) -> Int32).self)
            return { syncfs($0) }
        }()
    #endif

    /// Whether `syncfs(2)` on a Linux kernel of this release (`uname -r`, `6.1.0-18-amd64`) fails when
    /// writing a file back failed. Before Linux 5.8 ("vfs: track per-sb writeback errors and report them to
    /// syncfs") it returned success regardless, where `fsync(2)` has reported such errors since 4.13: on an
    /// older kernel (RHEL 8's 4.18, Amazon Linux 2's 4.14) a batch is flushed file by file, so a failed
    /// write is never taken for a durable one. A release that cannot be read counts as old.
    package static func syncfsReportsErrors(kernelRelease: String) -> Bool {
        let numbers = kernelRelease.split(whereSeparator: { !$0.isNumber }).prefix(2).compactMap { Int($0) }
        guard numbers.count == 2 else { return false }
        return numbers[0] > 5 || (numbers[0] == 5 && numbers[1] >= 8)
    }
}

/// The C library's `fsync`, named apart from ``FlushCalls/fsync``.
private func systemFsync(_ descriptor: Int32) -> Int32 { fsync(descriptor) }
