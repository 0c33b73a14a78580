import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// CPU time, user and system together, as `getrusage` reports it.
enum CPUTime {
    /// Every thread of this process so far.
    static func used() -> Duration {
        #if os(Linux)
            usage(__rusage_who_t(RUSAGE_SELF.rawValue))
        #else
            usage(RUSAGE_SELF)
        #endif
    }

    /// The child processes this process has waited for so far (the tools a scenario runs).
    static func usedByChildren() -> Duration {
        #if os(Linux)
            usage(__rusage_who_t(RUSAGE_CHILDREN.rawValue))
        #else
            usage(RUSAGE_CHILDREN)
        #endif
    }

    #if os(Linux)
        private typealias Who = __rusage_who_t
    #else
        private typealias Who = Int32
    #endif

    private static func usage(_ who: Who) -> Duration {
        var usage = rusage()
        guard getrusage(who, &usage) == 0 else { return .zero }
        func duration(_ time: timeval) -> Duration {
            .seconds(Int64(time.tv_sec)) + .microseconds(Int64(time.tv_usec))
        }
        return duration(usage.ru_utime) + duration(usage.ru_stime)
    }
}
