#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Giving back the disk space of a range of a file that is no longer needed, and finding where such a hole
/// ends: how a large encrypted download frees its ciphertext as it is decrypted (see
/// ``EncryptedRemoteStorage``).
///
/// Both are best effort: a file system that cannot punch holes keeps the bytes (the space is not given
/// back, nothing else changes), and one that does not report holes reports the whole file as data.
package enum FileHoles {
    /// Holes are punched at multiples of this many bytes (64 KiB), so that every block they cover is freed
    /// whole on any file system whose block size divides it (4 KiB on APFS and ext4): a file system punching
    /// part of a block writes zeros there instead, which could not be told from data.
    package static let alignment: Int64 = 64 << 10

    /// Frees bytes `offset..<offset + length` of the open file `descriptor` (opened for writing), keeping its
    /// size: they then read as zeros. Both bounds must be multiples of ``alignment``. Returns whether the
    /// file system did.
    ///
    /// - Linux: `fallocate(2)` with `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE` (ext4, XFS, Btrfs, tmpfs).
    ///   Swift's Glibc module does not declare `fallocate`, so it is looked up by name.
    /// - Apple platforms: `fcntl(2)` with `F_PUNCHHOLE` (APFS), whose range must be aligned to the file
    ///   system's blocks.
    @discardableResult
    package static func punch(_ descriptor: Int32, offset: Int64, length: Int64) -> Bool {
        guard length > 0, offset >= 0, offset % alignment == 0, length % alignment == 0 else { return false }
        #if canImport(Darwin)
            var range = fpunchhole_t(fp_flags: 0, reserved: 0, fp_offset: off_t(offset), fp_length: off_t(length))
            return fcntl(descriptor, F_PUNCHHOLE, &range) == 0
        #else
            guard let fallocate = linuxFallocate else { return false }
            // FALLOC_FL_KEEP_SIZE (1) | FALLOC_FL_PUNCH_HOLE (2), from <linux/falloc.h>.
            return fallocate(descriptor, 0x01 | 0x02, off_t(offset), off_t(length)) == 0
        #endif
    }

    /// The first offset at or after `offset` that holds data in the open file `descriptor`: `offset` itself
    /// when it does (or when the file system does not report holes), the file's size when only a hole
    /// follows, `nil` when it cannot tell.
    package static func dataStart(_ descriptor: Int32, from offset: Int64) -> Int64? {
        #if canImport(Darwin)
            let seekData = SEEK_DATA
        #else
            // SEEK_DATA from <unistd.h> (Linux 3.1 on), which Swift's Glibc module does not declare.
            let seekData: Int32 = 3
        #endif
        let found = lseek(descriptor, off_t(offset), seekData)
        if found >= 0 { return Int64(found) }
        // ENXIO: no data at or after `offset` (a hole up to the end, or `offset` at or past the end).
        guard errno == ENXIO else { return nil }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return nil }
        return Int64(status.st_size)
    }

    #if !canImport(Darwin)
        /// glibc's `fallocate`, or `nil` when the C library lacks it.
        private static let linuxFallocate: (@Sendable (Int32, Int32, off_t, off_t) -> Int32)? = {
            guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "fallocate") else { return nil }
            let fallocate = unsafeBitCast(symbol, to: (@convention(c) (Int32, Int32, off_t, off_t) -> Int32).self)
            return { fallocate($0, $1, $2, $3) }
        }()
    #endif
}
