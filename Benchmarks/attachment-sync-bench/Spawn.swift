import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Runs a program to its end with `posix_spawn`, for the scenarios that compare against other tools or need a
/// child of their own.
///
/// Foundation's `Process.run()` is not used: on Linux (swift-corelibs-foundation, Swift 6.3) it reads past
/// `readdir`'s buffer while it scans `/proc/self/fd` and now and then crashes this process (SIGSEGV in
/// `__memcpy`, swift-corelibs-foundation #5472). The tests have a fuller runner of their own
/// (Tests/TestSupport/ChildProcess.swift) that an executable target cannot import.
enum Spawn {
    /// Runs `executable` with `arguments` and exactly `environment`, in `directory` (`nil`: this process's),
    /// and returns its exit status; `what` names it in errors.
    ///
    /// Its standard input is `/dev/null`; `output` and `error` are this process's descriptors it writes to
    /// (`nil`: this process's own). It keeps no other descriptor of this process, and every signal has its
    /// default action in it. A child still running after `limit` (`nil`: no limit) or when the task is
    /// cancelled is killed; that and an end by a signal throw a ``BenchmarkFailure``.
    static func run(
        _ executable: String, _ arguments: [String], environment: [String: String], directory: String? = nil,
        output: Int32? = nil, error: Int32? = nil, limit: Duration?, what: String
    ) async throws -> Int32 {
        let pid = try start(executable, arguments, environment, directory, [output, error])
        // A thread of its own waits for the end without reaping it (WNOWAIT), so the pid stays the child's until
        // the `waitpid` below: the kill before it can never reach another process given the same pid.
        let (ended, end) = AsyncStream.makeStream(of: Void.self)
        Thread {
            var info = siginfo_t()
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) == -1 && errno == EINTR {}
            end.finish()
        }.start()
        var failure: (any Error)?
        do {
            let inTime = try await withThrowingTaskGroup(of: Bool.self) { group in
                group.addTask {
                    for await _ in ended {}
                    return true
                }
                if let limit {
                    group.addTask {
                        try await ContinuousClock().sleep(for: limit)
                        return false
                    }
                }
                defer { group.cancelAll() }
                return try await group.next() ?? false
            }
            // A cancelled wait for the end returns at once, as if the child had ended.
            try Task.checkCancellation()
            if !inTime { failure = BenchmarkFailure("\(what) did not finish within \(limit ?? .zero)") }
        } catch {
            failure = error
        }
        if failure != nil { kill(pid, SIGKILL) }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        if let failure { throw failure }
        // WTERMSIG and WEXITSTATUS (the same encoding on Linux and Apple platforms).
        guard status & 0x7f == 0 else { throw BenchmarkFailure("\(what) was ended by signal \(status & 0x7f)") }
        return (status >> 8) & 0xff
    }

    /// Starts the child with `/dev/null` as its 0 and `streams` as its 1 and 2; returns its pid.
    private static func start(
        _ executable: String, _ arguments: [String], _ environment: [String: String], _ directory: String?,
        _ streams: [Int32?]
    ) throws -> pid_t {
        let null = open("/dev/null", O_RDONLY | O_CLOEXEC)
        guard null >= 0 else { throw BenchmarkFailure("cannot open /dev/null: \(String(cString: strerror(errno)))") }
        defer { close(null) }
        #if canImport(Darwin)
            var actions: posix_spawn_file_actions_t? = nil
            var attributes: posix_spawnattr_t? = nil
        #else
            var actions = posix_spawn_file_actions_t()
            var attributes = posix_spawnattr_t()
        #endif
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var results = [posix_spawn_file_actions_adddup2(&actions, null, 0)]
        // Open until the child is started: the stream given, or this process's own, copied to a number of 3 or
        // more, so no dup2 overwrites another's source.
        var sources: [Int32] = []
        defer { for source in sources { close(source) } }
        for (number, stream) in zip(Int32(1)..., streams) {
            let source = fcntl(stream ?? number, F_DUPFD_CLOEXEC, 3)
            guard source >= 0 else { throw BenchmarkFailure("cannot copy descriptor \(stream ?? number)") }
            sources.append(source)
            results.append(posix_spawn_file_actions_adddup2(&actions, source, number))
        }
        var flags = Int32(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)
        // Looked up by name: glibc's are left out of Swift's Glibc module (no _GNU_SOURCE), and Apple's
        // chdir action changes its name in newer SDKs.
        if let directory {
            guard let changeDirectory = dlsym(defaultHandle, "posix_spawn_file_actions_addchdir_np") else {
                throw BenchmarkFailure("this C library has no posix_spawn_file_actions_addchdir_np")
            }
            let addChangeDirectory = unsafeBitCast(changeDirectory, to: AddChangeDirectory.self)
            results.append(addChangeDirectory(&actions, directory))
        }
        #if canImport(Darwin)
            flags |= Int32(POSIX_SPAWN_CLOEXEC_DEFAULT)
        #else
            guard let closeFrom = dlsym(defaultHandle, "posix_spawn_file_actions_addclosefrom_np") else {
                throw BenchmarkFailure("this C library has no posix_spawn_file_actions_addclosefrom_np")
            }
            results.append(unsafeBitCast(closeFrom, to: AddCloseFrom.self)(&actions, 3))
        #endif
        var signals = sigset_t()
        sigemptyset(&signals)
        results.append(posix_spawnattr_setsigmask(&attributes, &signals))
        sigfillset(&signals)
        results.append(posix_spawnattr_setsigdefault(&attributes, &signals))
        results.append(posix_spawnattr_setflags(&attributes, Int16(flags)))
        if let failed = results.first(where: { $0 != 0 }) {
            throw BenchmarkFailure("cannot prepare \(executable): \(String(cString: strerror(failed)))")
        }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for string in argv + envp { free(string) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard result == 0 else {
            throw BenchmarkFailure("cannot start \(executable): \(String(cString: strerror(result)))")
        }
        return pid
    }
}

/// What a `posix_spawn_file_actions_t *` points to as Swift sees it: Darwin's type is itself a pointer
/// (`void *`, imported as an optional raw pointer), glibc's a struct.
#if canImport(Darwin)
    private typealias FileActions = posix_spawn_file_actions_t?
#else
    private typealias FileActions = posix_spawn_file_actions_t
#endif

/// `posix_spawn_file_actions_addclosefrom_np`'s type, to call it looked up by name.
private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<FileActions>?, Int32) -> Int32

/// `posix_spawn_file_actions_addchdir_np`'s type, to call it looked up by name.
private typealias AddChangeDirectory =
    @convention(c) (UnsafeMutablePointer<FileActions>?, UnsafePointer<CChar>?) -> Int32

/// `dlsym`'s handle for the process's global symbols, the C library's among them.
private var defaultHandle: UnsafeMutableRawPointer? {
    #if canImport(Darwin)
        RTLD_DEFAULT
    #else
        nil
    #endif
}
