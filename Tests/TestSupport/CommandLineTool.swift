import Foundation

/// The `attachment-sync` executable of the build these tests belong to, run as a child process.
///
/// A test target cannot import an executable target, so the tests run the built binary. It is looked for
/// next to the test product (`swift build --build-tests` builds every product), never elsewhere, so a stale
/// binary from another build folder is not picked up.
package struct CommandLineTool {
    /// How a finished run ended and what it printed.
    package struct Result: Sendable {
        /// How the process ended: an exit status, or the signal that ended it.
        package var termination: ChildProcess.Termination
        package var standardOutput: String
        package var standardError: String

        /// The exit status; for a process a signal ended, the signal's number negated, which no exit status
        /// is (so `status == 130` means the tool itself exited with 130, not that SIGINT killed it).
        package var status: Int32 {
            switch termination {
            case .exited(let status): status
            case .signaled(let signal): -signal
            }
        }
    }

    /// The executable's name.
    package static let name = "attachment-sync"

    package let url: URL

    /// Finds the executable in the folder that holds the running test product: `<build>/debug`, where the
    /// Linux test executable `…PackageTests.xctest` and the Apple `.xctest` bundle both live.
    package static func locate(_ name: String = Self.name) throws -> CommandLineTool {
        var folders: [URL] = []
        for bundle in Bundle.allBundles where bundle.bundleURL.pathExtension == "xctest" {
            folders.append(bundle.bundleURL.deletingLastPathComponent())
        }
        if let executable = Bundle.main.executableURL, executable.pathExtension == "xctest" {
            folders.append(executable.deletingLastPathComponent())
        }
        if let first = CommandLine.arguments.first, first.hasSuffix(".xctest") {
            folders.append(URL(fileURLWithPath: first).deletingLastPathComponent())
        }
        for folder in folders {
            let candidate = folder.appendingPathComponent(name)
            if FileManager.default.isExecutableFile(atPath: candidate.path) {
                return CommandLineTool(url: candidate)
            }
        }
        throw ToolNotFound(name: name, searched: folders.map(\.path))
    }

    /// Runs the tool with `arguments` and the test process's environment changed by `environment` (a `nil`
    /// value removes the variable), its output going to files so a full pipe never blocks it; waits for it to
    /// exit. The deadline only turns a hang into a failure, and kills the process.
    package func run(_ arguments: [String], environment: [String: String?] = [:], seconds: Double = 120) async throws
        -> Result
    {
        try await withTemporaryDirectory { folder in
            let outputPath = folder.appendingPathComponent("stdout").path
            let errorPath = folder.appendingPathComponent("stderr").path
            let process = try ChildProcess(
                url.path, arguments, environment: Self.environment(changedBy: environment),
                standardOutput: .file(outputPath), standardError: .file(errorPath))
            let termination: ChildProcess.Termination
            do {
                termination = try await process.wait(seconds: seconds)
            } catch {
                process.kill()
                throw error
            }
            return Result(
                termination: termination,
                standardOutput: String(decoding: try Data(contentsOf: URL(fileURLWithPath: outputPath)), as: UTF8.self),
                standardError: String(decoding: try Data(contentsOf: URL(fileURLWithPath: errorPath)), as: UTF8.self))
        }
    }

    /// The test process's environment, changed by `changes` (a `nil` value removes the variable).
    static func environment(changedBy changes: [String: String?]) -> [String: String] {
        var variables = ProcessInfo.processInfo.environment
        for (name, value) in changes {
            variables[name] = value
        }
        return variables
    }
}

extension CommandLineTool {
    /// A run of the tool still going, for tests that act while it runs (send it a signal, say).
    package final class Running: Sendable {
        let process: ChildProcess
        /// Standard output so far, after each chunk that arrives (newest only); it ends with the output.
        package let output: AsyncStream<String>

        init(process: ChildProcess, output: AsyncStream<String>) {
            self.process = process
            self.output = output
        }

        /// The process's id.
        package var pid: Int32 { process.pid }

        /// Waits until standard output contains `text` (within `seconds`), and returns the output so far.
        @discardableResult
        package func waitForOutput(containing text: String, seconds: Double = 120) async throws -> String {
            try await firstElement(
                "\(CommandLineTool.name)'s output to contain \(String(reflecting: text))", in: output,
                seconds: seconds
            ) { $0.contains(text) }
        }

        /// Sends `signal` to the process (unless it has ended).
        package func send(_ signal: Int32) {
            process.send(signal)
        }

        /// Waits for the process to exit and its output to end (within `seconds`; then it is killed and this
        /// throws).
        package func wait(seconds: Double = 120) async throws -> Result {
            let termination: ChildProcess.Termination
            do {
                termination = try await process.wait(seconds: seconds)
            } catch {
                let running = process.isRunning
                process.kill()
                throw StillRunning(
                    wasRunning: running, standardOutput: process.capturedOutput,
                    standardError: process.capturedError)
            }
            return Result(
                termination: termination, standardOutput: process.capturedOutput,
                standardError: process.capturedError)
        }
    }

    /// Starts the tool with `arguments` and the environment changed by `environment`, its output read through
    /// pipes as it comes.
    package func start(_ arguments: [String], environment: [String: String?] = [:]) throws -> Running {
        let (output, continuation) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .bufferingNewest(1))
        let process = try ChildProcess(
            url.path, arguments, environment: Self.environment(changedBy: environment),
            standardOutput: .capture { text, ended in
                continuation.yield(text)
                if ended { continuation.finish() }
            },
            standardError: .capture())
        return Running(process: process, output: output)
    }
}

/// A run of the tool did not end in time.
package struct StillRunning: Error, CustomStringConvertible {
    package let wasRunning: Bool
    package let standardOutput: String
    package let standardError: String

    package var description: String {
        "\(CommandLineTool.name) did not "
            + (wasRunning ? "exit in time (terminated)" : "report the end of its output in time, though it exited")
            + "\nstdout: \(standardOutput)\nstderr: \(standardError)"
    }
}

/// The executable is not where the tests expect it.
package struct ToolNotFound: Error, CustomStringConvertible {
    package let name: String
    package let searched: [String]
    package var description: String {
        "\(name) was not found next to the test product (looked in: "
            + (searched.isEmpty ? "no candidate folder" : searched.joined(separator: ", "))
            + "). Build every product first: `swift build --build-tests`, then `swift test --skip-build` with "
            + "the same --scratch-path."
    }
}
