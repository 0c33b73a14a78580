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

    /// A `kB` field of `/proc/self/status`, or `nil` when there is no such file or field.
    private static func procStatusKiB(_ field: String) -> Int64? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
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
