import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A program the tests (the CLI, the crash worker, `curl`) and the benchmarks (the tools they compare
/// against, the benchmark itself for a scenario whose memory must be its own) run as a child process, started
/// with `posix_spawn`.
///
/// Neither uses Foundation's `Process`: on Linux its `run()` (swift-corelibs-foundation, Swift 6.3) reads
/// past the end of `readdir`'s buffer while it looks for the highest open descriptor in `/proc/self/fd`, and
/// now and then that crashes the whole test process (SIGSEGV in `__memcpy`, swift-corelibs-foundation #5472).
///
/// The child gets the arguments and the environment given and nothing else of this process: standard input
/// is `/dev/null`, standard output and error go where ``Output`` says, every other descriptor is closed in it
/// (`posix_spawn_file_actions_addclosefrom_np` on Linux, `POSIX_SPAWN_CLOEXEC_DEFAULT` on Apple platforms;
/// the descriptors made here are close-on-exec too, so no other child started meanwhile inherits a pipe and
/// keeps it open), every signal has its default action and none is blocked.
///
/// A thread of its own waits for the exit (blocking in `waitid`, never on the cooperative pool), so the child
/// is reaped whether or not anyone awaits it. It reaps with the lock held that ``send(_:)`` takes, so a signal
/// never reaches another process that was given the same pid afterwards. Captured output is read by threads
/// of its own as it comes, so a child never blocks on a full pipe.
///
/// ```swift
/// let curl = try ChildProcess("/usr/bin/curl", ["-sf", url], standardError: .capture())
/// let termination = try await curl.wait(seconds: 60)
/// #expect(termination == .exited(0), "\(curl.capturedError)")
/// ```
package final class ChildProcess: @unchecked Sendable {
    // Safe to share: `pid`, `executable` and `arguments` are constants; every other stored property is read
    // and written only while `condition` is held.

    /// How a child process ended.
    package enum Termination: Sendable, Hashable, CustomStringConvertible {
        /// It exited with this status.
        case exited(Int32)
        /// This signal ended it.
        case signaled(Int32)

        package var description: String {
            switch self {
            case .exited(let status): "exited with status \(status)"
            case .signaled(let signal): "ended by signal \(signal)"
            }
        }
    }

    /// Where the child's standard output or error goes.
    package enum Output: Sendable {
        /// To `/dev/null`.
        case discard
        /// To this process's own (the test log).
        case inherit
        /// To the file at this path, created or truncated first.
        case file(String)
        /// Through a pipe to this process, which keeps all of it (``capturedOutput``, ``capturedError``).
        /// `onChange`, if given, is called on the pipe's reader thread with the text so far after each chunk
        /// (`ended` false), and once more when the child closed its end (`ended` true).
        case capture(onChange: (@Sendable (_ text: String, _ ended: Bool) -> Void)? = nil)
    }

    /// The child's process id.
    package let pid: pid_t
    /// The program's path.
    package let executable: String
    /// The arguments after the program's path.
    package let arguments: [String]

    private let condition = NSCondition()
    private var termination: Swift.Result<Termination, ChildProcessError>?
    /// Captured streams not yet read to their end.
    private var openPipes = 0
    private var captured: [Int32: [UInt8]] = [:]
    private var waiters: [UInt64: CheckedContinuation<Termination, any Error>] = [:]
    private var nextWaiter: UInt64 = 0

    /// Starts `executable` (a path) with `arguments` and exactly the variables of `environment`.
    ///
    /// - Parameters:
    ///   - environment: The child's whole environment. The default is this process's.
    ///   - directory: The folder the child starts in. The default, `nil`, is this process's.
    ///   - standardOutput: Where its standard output goes. The default is ``Output/discard``.
    ///   - standardError: Where its standard error goes. The default is ``Output/discard``.
    /// - Throws: ``ChildProcessError`` naming the program or file and the system's reason when it cannot start.
    package init(
        _ executable: String, _ arguments: [String],
        environment: [String: String] = ProcessInfo.processInfo.environment, directory: String? = nil,
        standardOutput: Output = .discard, standardError: Output = .discard
    ) throws {
        self.executable = executable
        self.arguments = arguments
        // The parent's copies of what the child gets as 0, 1 and 2; closed here once it is started.
        var given: [Int32] = []
        defer { for descriptor in given { _ = close(descriptor) } }
        var readers: [(descriptor: Int32, number: Int32, onChange: (@Sendable (String, Bool) -> Void)?)] = []
        do {
            given.append(try Self.open("/dev/null", O_RDONLY))
            for (number, output) in [(Int32(1), standardOutput), (2, standardError)] {
                switch output {
                case .discard: given.append(try Self.open("/dev/null", O_WRONLY))
                case .inherit:
                    let copy = fcntl(number, F_DUPFD_CLOEXEC, 3)
                    guard copy >= 0 else { throw ChildProcessError("cannot copy descriptor \(number)", errno) }
                    given.append(copy)
                case .file(let path): given.append(try Self.open(path, O_WRONLY | O_CREAT | O_TRUNC))
                case .capture(let onChange):
                    let (readEnd, writeEnd) = try Self.pipe()
                    readers.append((readEnd, number, onChange))
                    given.append(writeEnd)
                }
            }
            pid = try Self.spawn(
                executable, arguments, environment: environment, directory: directory, descriptors: given)
        } catch {
            for reader in readers { _ = close(reader.descriptor) }
            throw error
        }
        openPipes = readers.count
        for reader in readers {
            captured[reader.number] = []
            Self.startThread("read \(reader.number) of \(pid)") {
                self.drain(reader.descriptor, number: reader.number, onChange: reader.onChange)
            }
        }
        Self.startThread("wait for \(pid)") { self.reap() }
    }

    /// Whether the child has not ended yet (it has not been reaped).
    package var isRunning: Bool {
        locked { termination == nil }
    }

    /// What the child wrote to standard output so far, when it is ``Output/capture(onChange:)``d.
    package var capturedOutput: String {
        locked { String(decoding: captured[1] ?? [], as: UTF8.self) }
    }

    /// What the child wrote to standard error so far, when it is ``Output/capture(onChange:)``d.
    package var capturedError: String {
        locked { String(decoding: captured[2] ?? [], as: UTF8.self) }
    }

    /// The program's name and arguments, for messages.
    package var commandLine: String {
        ([URL(fileURLWithPath: executable).lastPathComponent] + arguments).joined(separator: " ")
    }

    /// Sends `signal` to the child, unless it has ended already; `true` if the signal was sent.
    @discardableResult
    package func send(_ signal: Int32) -> Bool {
        locked { termination == nil && sendSignal(pid, signal) == 0 }
    }

    /// Sends `SIGKILL` to the child, unless it has ended already. Returns at once: ``wait()`` for the end.
    package func kill() {
        send(SIGKILL)
    }

    /// Waits until the child has ended and its captured output has been read to the end, and returns how it
    /// ended. Throws `CancellationError` when the task is cancelled first (the child runs on), or a
    /// ``ChildProcessError`` if the system could not report the end.
    package func wait() async throws -> Termination {
        let id = locked {
            nextWaiter += 1
            return nextWaiter
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                condition.lock()
                if let termination, openPipes == 0 {
                    condition.unlock()
                    continuation.resume(with: termination.mapError { $0 as any Error })
                } else if Task.isCancelled {
                    condition.unlock()
                    continuation.resume(throwing: CancellationError())
                } else {
                    waiters[id] = continuation
                    condition.unlock()
                }
            }
        } onCancel: {
            locked { waiters.removeValue(forKey: id) }?.resume(throwing: CancellationError())
        }
    }

    /// ``wait()`` within `seconds`, else ``DeadlineExceeded`` (the child runs on: kill it if it must not).
    package func wait(seconds: Double) async throws -> Termination {
        try await withDeadline(seconds: seconds, "\(commandLine) to exit") { try await self.wait() }
    }

    /// Blocks the calling thread until the child has ended and its captured output has been read, within
    /// `seconds` (else ``DeadlineExceeded``). Only for synchronous code that must wait (a request observer);
    /// async code awaits ``wait(seconds:)``.
    package func waitBlocking(seconds: Double) throws -> Termination {
        let deadline = Date(timeIntervalSinceNow: seconds)
        condition.lock()
        defer { condition.unlock() }
        while termination == nil || openPipes > 0 {
            guard condition.wait(until: deadline) else {
                throw DeadlineExceeded(what: "\(commandLine) to exit", seconds: seconds)
            }
        }
        return try termination!.get()
    }

    // MARK: - The threads

    /// Blocks until the child has ended, then reaps it (the waiting thread's only job).
    private func reap() {
        var info = siginfo_t()
        var waited: Int32
        // Waits without reaping: the pid stays the child's until the lock below is held.
        repeat {
            waited = waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT)
        } while waited == -1 && errno == EINTR
        let waitError = errno
        let ready: [CheckedContinuation<Termination, any Error>] = locked {
            var status: Int32 = 0
            var reaped: pid_t = -1
            if waited == 0 {
                repeat {
                    reaped = waitpid(pid, &status, 0)
                } while reaped == -1 && errno == EINTR
            }
            if reaped == pid {
                // The encoding of `wait` statuses: the low 7 bits are the signal (0 for an exit), the next 8 the
                // exit status (WIFEXITED, WEXITSTATUS, WTERMSIG; the same on Linux and Apple platforms).
                let signal = status & 0x7f
                termination = .success(signal == 0 ? .exited((status >> 8) & 0xff) : .signaled(signal))
            } else {
                let code = waited == 0 ? errno : waitError
                termination = .failure(ChildProcessError("cannot learn how \(commandLine) (pid \(pid)) ended", code))
            }
            return takeWaitersIfDone()
        }
        resume(ready)
    }

    /// Reads the pipe `descriptor` (the child's `number`) to its end, keeping what comes.
    private func drain(_ descriptor: Int32, number: Int32, onChange: (@Sendable (String, Bool) -> Void)?) {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { readBytes(descriptor, $0.baseAddress, $0.count) }
            if count == -1 && errno == EINTR { continue }
            guard count > 0 else { break }
            let text: String? = locked {
                captured[number, default: []].append(contentsOf: buffer[0..<count])
                return onChange == nil ? nil : String(decoding: captured[number] ?? [], as: UTF8.self)
            }
            if let text { onChange?(text, false) }
        }
        _ = close(descriptor)
        let text = locked { String(decoding: captured[number] ?? [], as: UTF8.self) }
        onChange?(text, true)
        let ready: [CheckedContinuation<Termination, any Error>] = locked {
            openPipes -= 1
            return takeWaitersIfDone()
        }
        resume(ready)
    }

    /// The waiters to resume once the child has ended and every pipe is read; called with the lock held.
    private func takeWaitersIfDone() -> [CheckedContinuation<Termination, any Error>] {
        guard termination != nil, openPipes == 0 else { return [] }
        condition.broadcast()
        defer { waiters = [:] }
        return Array(waiters.values)
    }

    private func resume(_ ready: [CheckedContinuation<Termination, any Error>]) {
        guard !ready.isEmpty, let termination = locked({ termination }) else { return }
        for waiter in ready { waiter.resume(with: termination.mapError { $0 as any Error }) }
    }

    private func locked<T>(_ body: () throws -> T) rethrows -> T {
        condition.lock()
        defer { condition.unlock() }
        return try body()
    }

    private static func startThread(_ name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread(block: body)
        thread.name = "ChildProcess: \(name)"
        thread.start()
    }

    // MARK: - Starting

    /// `path` opened with `flags`, close-on-exec.
    private static func open(_ path: String, _ flags: Int32) throws -> Int32 {
        let descriptor = openFile(path, flags | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw ChildProcessError("cannot open \(path)", errno) }
        return descriptor
    }

    /// A pipe whose two ends are close-on-exec from the start (`pipe2` where the C library has it).
    private static func pipe() throws -> (readEnd: Int32, writeEnd: Int32) {
        var ends: [Int32] = [-1, -1]
        #if canImport(Glibc)
            if let pipe2 = CLibraryExtras.pipe2 {
                guard pipe2(&ends, O_CLOEXEC) == 0 else { throw ChildProcessError("cannot make a pipe", errno) }
                return (ends[0], ends[1])
            }
        #endif
        // Not atomic, but every child started here closes what it was not given anyway.
        guard makePipe(&ends) == 0 else { throw ChildProcessError("cannot make a pipe", errno) }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        return (ends[0], ends[1])
    }

    /// Starts the child with `descriptors` as its 0, 1 and 2 and no other, in `directory` (`nil`: this
    /// process's); returns its pid.
    private static func spawn(
        _ executable: String, _ arguments: [String], environment: [String: String], directory: String?,
        descriptors: [Int32]
    ) throws -> pid_t {
        #if canImport(Darwin)
            var actions: posix_spawn_file_actions_t? = nil
            var attributes: posix_spawnattr_t? = nil
        #else
            var actions = posix_spawn_file_actions_t()
            var attributes = posix_spawnattr_t()
        #endif
        try check(posix_spawn_file_actions_init(&actions), "posix_spawn_file_actions_init")
        defer { posix_spawn_file_actions_destroy(&actions) }
        try check(posix_spawnattr_init(&attributes), "posix_spawnattr_init")
        defer { posix_spawnattr_destroy(&attributes) }

        // Every source is 3 or more (0, 1 and 2 are this process's own), so no dup2 overwrites a later source.
        for (number, descriptor) in descriptors.enumerated() {
            try check(posix_spawn_file_actions_adddup2(&actions, descriptor, Int32(number)), "adddup2")
        }
        if let directory {
            guard let addChangeDirectory = CLibraryExtras.addChangeDirectory else {
                throw ChildProcessError("this C library has no posix_spawn_file_actions_addchdir_np", ENOSYS)
            }
            try check(addChangeDirectory(&actions, directory), "posix_spawn_file_actions_addchdir_np \(directory)")
        }
        var flags = Int32(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)
        #if canImport(Darwin)
            // Every descriptor not named by a file action is closed in the child.
            flags |= Int32(POSIX_SPAWN_CLOEXEC_DEFAULT)
        #else
            if let closeFrom = CLibraryExtras.addCloseFrom {
                try check(closeFrom(&actions, 3), "posix_spawn_file_actions_addclosefrom_np")
            }
        #endif
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        try check(posix_spawnattr_setsigmask(&attributes, &noSignals), "posix_spawnattr_setsigmask")
        // Signals this process ignores (SIGPIPE, say) would stay ignored across exec without this.
        var allSignals = sigset_t()
        sigfillset(&allSignals)
        try check(posix_spawnattr_setsigdefault(&attributes, &allSignals), "posix_spawnattr_setsigdefault")
        try check(posix_spawnattr_setflags(&attributes, Int16(flags)), "posix_spawnattr_setflags")

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for string in argv + envp { free(string) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard result == 0 else { throw ChildProcessError("cannot start \(executable)", result) }
        return pid
    }

    private static func check(_ result: Int32, _ call: String) throws {
        guard result == 0 else { throw ChildProcessError(call, result) }
    }
}

/// A child process could not be started or waited for: what failed and the system's error number.
package struct ChildProcessError: Error, CustomStringConvertible {
    package let what: String
    package let code: Int32

    init(_ what: String, _ code: Int32) {
        self.what = what
        self.code = code
    }

    package var description: String { "\(what): \(String(cString: strerror(code))) (errno \(code))" }
}

// The C calls whose names the methods above use for themselves, and the functions Swift's C modules leave
// out (Glibc is imported without _GNU_SOURCE): looked up by name, absent on an older C library.

private func sendSignal(_ pid: pid_t, _ signal: Int32) -> Int32 { kill(pid, signal) }
private func readBytes(_ descriptor: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int {
    read(descriptor, buffer, count)
}
private func openFile(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32 { open(path, flags, mode) }
private func makePipe(_ ends: UnsafeMutablePointer<Int32>) -> Int32 { pipe(ends) }

/// What a `posix_spawn_file_actions_t *` points to as Swift sees it: Darwin's type is itself a pointer
/// (`void *`, imported as an optional raw pointer), glibc's a struct.
#if canImport(Darwin)
    private typealias FileActions = posix_spawn_file_actions_t?
#else
    private typealias FileActions = posix_spawn_file_actions_t
#endif

private enum CLibraryExtras {
    typealias AddChangeDirectory = @convention(c) (UnsafeMutablePointer<FileActions>?, UnsafePointer<CChar>?) -> Int32

    /// `posix_spawn_file_actions_addchdir_np` (glibc 2.29, macOS 10.15; newer Apple SDKs rename it).
    static let addChangeDirectory = function("posix_spawn_file_actions_addchdir_np", as: AddChangeDirectory.self)

    #if canImport(Glibc)
        typealias Pipe2 = @convention(c) (UnsafeMutablePointer<Int32>?, Int32) -> Int32
        typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<FileActions>?, Int32) -> Int32

        /// `pipe2` (glibc 2.9).
        static let pipe2 = function("pipe2", as: Pipe2.self)
        /// `posix_spawn_file_actions_addclosefrom_np` (glibc 2.34).
        static let addCloseFrom = function("posix_spawn_file_actions_addclosefrom_np", as: AddCloseFrom.self)
    #endif

    static func function<F>(_ name: String, as type: F.Type) -> F? {
        // The handle for the process's global symbols, the C library's among them.
        #if canImport(Darwin)
            let handle = RTLD_DEFAULT
        #else
            let handle: UnsafeMutableRawPointer? = nil
        #endif
        guard let symbol = dlsym(handle, name) else { return nil }
        return unsafeBitCast(symbol, to: type)
    }
}
