import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The process's memory use, as the kernel reports it.
enum Memory {
    /// The peak resident set size of this process so far, in bytes: `VmHWM` from `/proc/self/status` on
    /// Linux, else `getrusage`'s `ru_maxrss`. `nil` when neither is available.
    static func peakResidentBytes() -> Int64? {
        if let kibibytes = procStatusKiB("VmHWM") { return kibibytes * 1024 }
        var usage = rusage()
        #if os(Linux)
            let who = __rusage_who_t(RUSAGE_SELF.rawValue)
        #else
            let who = RUSAGE_SELF
        #endif
        guard getrusage(who, &usage) == 0 else { return nil }
        #if canImport(Darwin)
            return Int64(usage.ru_maxrss)  // bytes on Apple platforms
        #else
            return Int64(usage.ru_maxrss) * 1024  // kibibytes on Linux
        #endif
    }

    /// The current resident set size in bytes (`VmRSS`), Linux only.
    static func currentResidentBytes() -> Int64? {
        procStatusKiB("VmRSS").map { $0 * 1024 }
    }

    /// The anonymous part of the current resident set (`RssAnon`: heap, stacks, private copies) in bytes,
    /// Linux only. File-backed pages (`RssFile`, a mapped file's) are not in it: the kernel can drop those
    /// and read them again, and on iOS they do not count against an app's memory limit.
    static func currentAnonymousBytes() -> Int64? {
        procStatusKiB("RssAnon").map { $0 * 1024 }
    }

    /// The file-backed part of the current resident set (`RssFile`: mapped files, the executable and its
    /// libraries) in bytes, Linux only.
    static func currentFileBackedBytes() -> Int64? {
        procStatusKiB("RssFile").map { $0 * 1024 }
    }

    /// Starts this process's peak resident set size (`VmHWM`) over from its current size (`5` written to
    /// `/proc/self/clear_refs`, Linux 4.0 and later). Returns whether it could.
    @discardableResult
    static func resetPeakResidentBytes() -> Bool {
        guard let handle = FileHandle(forWritingAtPath: "/proc/self/clear_refs") else { return false }
        defer { try? handle.close() }
        return (try? handle.write(contentsOf: Data("5".utf8))) != nil
    }

    /// A `kB` field of `/proc/<pid>/status` (by default this process's), or `nil` when there is no such file or
    /// field (not Linux, or the process has ended).
    static func procStatusKiB(_ field: String, pid: Int32? = nil) -> Int64? {
        let path = "/proc/\(pid.map(String.init) ?? "self")/status"
        guard let status = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix(field + ":") {
            let digits = line.dropFirst(field.count + 1).filter(\.isNumber)
            return Int64(String(digits))
        }
        return nil
    }
}

/// Facts about the machine the benchmark runs on.
enum Machine {
    /// The one-minute load average from `/proc/loadavg` (Linux), or `nil` elsewhere.
    static func loadAverage() -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8) else { return nil }
        return text.split(separator: " ").first.flatMap { Double($0) }
    }
}
