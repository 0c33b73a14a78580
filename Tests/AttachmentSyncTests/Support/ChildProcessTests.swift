import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The tests' own child-process runner (Foundation's `Process.run()` crashes now and then on Linux): exits
/// and signals told apart, nothing of the test process leaking into the child, output never lost.
@Suite("Child processes of the tests")
struct ChildProcessTests {
    @Test("an exit status and an ending signal are reported apart")
    func exitsAndSignals() async throws {
        let exits = try ChildProcess("/bin/sh", ["-c", "exit 3"])
        #expect(try await exits.wait(seconds: 60) == .exited(3))
        #expect(!exits.isRunning)
        // 128 + 15 as an exit status is not SIGTERM.
        let exits143 = try ChildProcess("/bin/sh", ["-c", "exit 143"])
        #expect(try await exits143.wait(seconds: 60) == .exited(143))
        let terminated = try ChildProcess("/bin/sh", ["-c", "kill -TERM $$"])
        #expect(try await terminated.wait(seconds: 60) == .signaled(SIGTERM))
    }

    @Test("a running child can be signalled and killed; a reaped one is sent nothing")
    func signalAndKill() async throws {
        let sleeper = try ChildProcess("/bin/sleep", ["600"])
        defer { sleeper.kill() }
        #expect(sleeper.isRunning)
        #expect(sleeper.send(0), "signal 0 (a check) reaches a running child")
        // It does not end by itself: the deadline passes and the wait gives up, the child runs on.
        await #expect(throws: DeadlineExceeded.self) { try await sleeper.wait(seconds: 0.2) }
        #expect(sleeper.isRunning)
        sleeper.kill()
        #expect(try await sleeper.wait(seconds: 60) == .signaled(SIGKILL))
        #expect(!sleeper.isRunning)
        #expect(!sleeper.send(SIGTERM), "the pid may be another process's by now")
        #expect(try sleeper.waitBlocking(seconds: 60) == .signaled(SIGKILL))
    }

    @Test("the child gets exactly the environment given")
    func environment() async throws {
        let env = try ChildProcess(
            "/usr/bin/env", [], environment: ["ONLY": "this", "AND": "that=too"], standardOutput: .capture())
        #expect(try await env.wait(seconds: 60) == .exited(0))
        #expect(Set(env.capturedOutput.split(separator: "\n")) == ["ONLY=this", "AND=that=too"])
    }

    @Test("standard output and error are captured whole, far past a pipe's buffer, or written to a file")
    func outputs() async throws {
        let large = try ChildProcess(
            "/bin/sh", ["-c", "head -c 300000 /dev/zero | tr '\\0' a; echo oops >&2"],
            standardOutput: .capture(), standardError: .capture())
        #expect(try await large.wait(seconds: 60) == .exited(0))
        #expect(large.capturedOutput == String(repeating: "a", count: 300_000))
        #expect(large.capturedError == "oops\n")
        try await withTemporaryDirectory { folder in
            let path = folder.appendingPathComponent("out").path
            try Data("old and longer content".utf8).write(to: URL(fileURLWithPath: path))
            let echo = try ChildProcess("/bin/echo", ["new"], standardOutput: .file(path))
            #expect(try await echo.wait(seconds: 60) == .exited(0))
            #expect(try String(contentsOfFile: path, encoding: .utf8) == "new\n", "the file is truncated first")
        }
    }

    @Test("the child starts in the folder given, else in this process's; a missing folder is a typed error")
    func workingDirectory() async throws {
        try await withTemporaryDirectory { folder in
            let inFolder = try ChildProcess("/bin/pwd", ["-P"], directory: folder.path, standardOutput: .capture())
            #expect(try await inFolder.wait(seconds: 60) == .exited(0))
            #expect(inFolder.capturedOutput == folder.resolvingSymlinksInPath().path + "\n")
            let here = try ChildProcess("/bin/pwd", ["-P"], standardOutput: .capture())
            #expect(try await here.wait(seconds: 60) == .exited(0))
            let ownFolder = URL(fileURLWithPath: FileManager.default.currentDirectoryPath).resolvingSymlinksInPath()
            #expect(here.capturedOutput == ownFolder.path + "\n")
            // posix_spawn reports the failed chdir as its own failure: the child never runs.
            let missing = folder.appendingPathComponent("missing").path
            let error = #expect(throws: ChildProcessError.self) {
                try ChildProcess("/bin/pwd", [], directory: missing)
            }
            #expect(error?.code == ENOENT)
        }
    }

    @Test("a program that is not there is a typed error naming it")
    func missingProgram() throws {
        let error = #expect(throws: ChildProcessError.self) {
            try ChildProcess("/nonexistent/attachment-sync-nothing", [])
        }
        #expect(error?.code == ENOENT)
        #expect(error?.description.contains("/nonexistent/attachment-sync-nothing") == true)
    }

    #if os(Linux)
        @Test("the child inherits no descriptor but 0, 1 and 2, no ignored signal and no blocked one")
        func nothingLeaks() async throws {
            try await withTemporaryDirectory { folder in
                // A descriptor of the test process without close-on-exec: exec alone would hand it on.
                let leaky = open(folder.appendingPathComponent("leaky").path, O_WRONLY | O_CREAT, 0o600)
                try #require(leaky >= 0)
                defer { close(leaky) }
                // Ignored signals survive exec unless reset. Ignoring SIGPIPE only turns a write to a closed
                // pipe in the test process into EPIPE (servers do it anyway).
                signal(SIGPIPE, SIG_IGN)
                let own = try ChildProcess("/usr/bin/readlink", ["/proc/self/fd/1"], standardOutput: .capture())
                #expect(try await own.wait(seconds: 60) == .exited(0), "the check can see a descriptor it has")
                let leaked = try ChildProcess(
                    "/usr/bin/readlink", ["/proc/self/fd/\(leaky)"], standardOutput: .capture())
                #expect(try await leaked.wait(seconds: 60) == .exited(1), "fd \(leaky): \(leaked.capturedOutput)")
                let ignored = try Self.signalMask("SigIgn", of: "self")
                #expect(ignored & (1 << (SIGPIPE - 1)) != 0, "the check can see an ignored signal")
                let status = try ChildProcess("/bin/cat", ["/proc/self/status"], standardOutput: .capture())
                #expect(try await status.wait(seconds: 60) == .exited(0))
                // glibc's posix_spawn ignores its own two internal signals (32 and 33, SIGCANCEL and SIGSETXID)
                // in every child it starts; no program's signal is among them.
                let glibcInternal: UInt64 = 1 << 31 | 1 << 32
                let childIgnored = try Self.signalMask("SigIgn", in: status.capturedOutput) & ~glibcInternal
                #expect(childIgnored == 0, "ignored in the child: \(String(childIgnored, radix: 16))")
                #expect(try Self.signalMask("SigBlk", in: status.capturedOutput) == 0)
            }
        }

        /// The signal set `field` (`SigIgn`, `SigBlk`: bit n - 1 for signal n) of `/proc/<process>/status`.
        static func signalMask(_ field: String, of process: String) throws -> UInt64 {
            try signalMask(field, in: String(contentsOfFile: "/proc/\(process)/status", encoding: .utf8))
        }

        /// The signal set `field` of a `/proc/<pid>/status` text.
        static func signalMask(_ field: String, in status: String) throws -> UInt64 {
            let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("\(field):\t") })
            return try #require(UInt64(line.dropFirst(field.count + 2), radix: 16), "\(line)")
        }
    #endif
}
