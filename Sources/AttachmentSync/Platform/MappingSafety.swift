import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// What makes a mapped file dangerous on each platform, for ``MappedFile``: a mapping whose file loses its
/// backing kills the process (`SIGBUS`) when its bytes are touched, where a read would only fail.
enum MappingSafety {
    /// Whether the open file `descriptor` lives on a volume of this machine's own fixed storage: a network
    /// share that stops answering or a drive pulled out takes a mapping's backing away.
    ///
    /// - Apple: the volume's `MNT_LOCAL` flag is set and `MNT_REMOVABLE` is not (`fstatfs(2)`,
    ///   `<sys/mount.h>`), the test Foundation's `mappedIfSafe` makes too.
    /// - Linux: the volume's file system keeps its data on this machine's disks or in its memory (ext2/3/4,
    ///   XFS, Btrfs, F2FS, ZFS, bcachefs, overlayfs, tmpfs; `f_type` of `fstatfs(2)`, linux/magic.h). Any
    ///   other (NFS, SMB, FUSE, 9p, Ceph, vfat on a stick…), or a type that cannot be read, is not mapped.
    static func isOnLocalFixedVolume(_ descriptor: Int32) -> Bool {
        #if canImport(Darwin)
            var volume = statfs()
            guard fstatfs(descriptor, &volume) == 0 else { return false }
            return volume.f_flags & UInt32(MNT_LOCAL) != 0 && volume.f_flags & UInt32(MNT_REMOVABLE) == 0
        #else
            guard let type = fileSystemType(descriptor) else { return false }
            return localFileSystemTypes.contains(type)
        #endif
    }

    #if !canImport(Darwin)
        /// `statfs.f_type` of Linux's local file systems.
        private static let localFileSystemTypes: Set<Int> = [
            0xEF53,  // ext2, ext3, ext4
            0x5846_5342,  // XFS
            0x9123_683E,  // Btrfs
            0xF2F5_2010,  // F2FS
            0x2FC1_2FC1,  // ZFS
            0xCA45_1A4E,  // bcachefs
            0x794C_7630,  // overlayfs (containers)
            0x0102_1994,  // tmpfs
        ]

        /// The C library's `fstatfs`, looked up by name: Swift's Glibc module leaves `<sys/vfs.h>` out.
        private static let fstatfs: (@convention(c) (Int32, UnsafeMutableRawPointer) -> Int32)? = {
            guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "fstatfs") else { return nil }
            return unsafeBitCast(symbol, to: (@convention(c) (Int32, UnsafeMutableRawPointer) -> Int32).self)
        }()

        /// The `f_type` of the descriptor's volume, or `nil` when it cannot be read. On 64-bit x86 and Arm
        /// (glibc and musl alike) `struct statfs` (120 bytes) starts with `f_type`, a `long`; elsewhere this
        /// answers `nil`.
        private static func fileSystemType(_ descriptor: Int32) -> Int? {
            #if arch(x86_64) || arch(arm64)
                guard let fstatfs else { return nil }
                let buffer = UnsafeMutableRawPointer.allocate(byteCount: 512, alignment: 16)
                defer { buffer.deallocate() }
                guard fstatfs(descriptor, buffer) == 0 else { return nil }
                return buffer.load(as: Int.self)
            #else
                return nil
            #endif
        }
    #endif

    /// Whether the file's Data Protection class keeps it readable while the device is locked: no class
    /// (macOS volumes, Linux), `none`, or `completeUntilFirstUserAuthentication`. A file of class `complete`
    /// (or `completeWhenUserInactive`) becomes unreadable soon after the device locks, and `completeUnlessOpen`
    /// once no descriptor holds it open: a mapping of it would then fault. The same Foundation call on every
    /// platform; it finds no class outside Apple's.
    static func isReadableWhileLocked(_ path: String) -> Bool {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path) else { return false }
        let value = attributes[.protectionKey]
        let named = (value as? String).map { FileProtectionType(rawValue: $0) }
        guard let protection = (value as? FileProtectionType) ?? named else { return true }
        return protection == .none || protection == .completeUntilFirstUserAuthentication
    }
}
