#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

extension stat {
    /// The last modification, in seconds since 1970. POSIX.1-2008 names the field `st_mtim` (glibc, musl);
    /// Darwin's `struct stat` calls the same `timespec` `st_mtimespec` (`<sys/stat.h>`, with
    /// `_DARWIN_FEATURE_64_BIT_INODE`, the only layout on arm64 and in every SDK Swift uses).
    var modificationSeconds: Double {
        #if canImport(Darwin)
            let time = st_mtimespec
        #else
            let time = st_mtim
        #endif
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
}
