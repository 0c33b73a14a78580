import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The `attachment-sync` executable of the build these tests belong to, run as a child process.
///
/// A test target cannot import an executable target, so the tests run the built binary. It is looked for
/// next to the test product (`swift build --build-tests` builds every product), never elsewhere, so a stale
/// binary from another build folder is not picked up.
package struct CommandLineTool {
    /// How a finished run exited and what it printed.
    package struct Result: Sendable {
        package var status: Int32
        package var standardOutput: String
        package var standardError: String
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
    /// exit. The deadline only turns a hang into a failure, and terminates the process.
    package func run(_ arguments: [String], environment: [String: String?] = [:], seconds: Double = 120) async throws
        -> Result
    {
        try await withTemporaryDirectory { folder in
            let outputURL = folder.appendingPathComponent("stdout")
            let errorURL = folder.appendingPathComponent("stderr")
            try Data().write(to: outputURL)
            try Data().write(to: errorURL)
            let output = try FileHandle(forWritingTo: outputURL)
            let error = try FileHandle(forWritingTo: errorURL)
            defer {
                try? output.close()
                try? error.close()
            }
            var variables = ProcessInfo.processInfo.environment
            for (name, value) in environment {
                variables[name] = value
            }
            let process = Process()
            process.executableURL = url
            process.arguments = arguments
            process.environment = variables
            process.standardOutput = output
            process.standardError = error
            let (exits, exited) = AsyncStream.makeStream(of: Int32.self, bufferingPolicy: .bufferingNewest(1))
            process.terminationHandler = { process in
                exited.yield(process.terminationStatus)
                exited.finish()
            }
            try process.run()
            let status: Int32
            do {
                status = try await firstElement(
                    "\(Self.name) \(arguments.joined(separator: " ")) to exit", in: exits,
                    seconds: seconds
                ) { _ in true }
            } catch {
                process.terminate()
                throw error
            }
            return Result(
                status: status,
                standardOutput: String(decoding: try Data(contentsOf: outputURL), as: UTF8.self),
                standardError: String(decoding: try Data(contentsOf: errorURL), as: UTF8.self))
        }
    }
}

extension CommandLineTool {
    /// A run of the tool still going, for tests that act while it runs (send it a signal, say).
    package final class Running: Sendable {
        let process: Process
        /// Standard output so far, after each chunk that arrives (newest only).
        package let output: AsyncStream<String>
        private let outputText: LockedText
        private let errorText: LockedText
        private let exits: AsyncStream<Int32>

        init(
            process: Process, output: AsyncStream<String>, outputText: LockedText, errorText: LockedText,
            exits: AsyncStream<Int32>
        ) {
            self.process = process
            self.output = output
            self.outputText = outputText
            self.errorText = errorText
            self.exits = exits
        }

        /// The process's id.
        package var pid: Int32 { process.processIdentifier }

        /// Waits until standard output contains `text` (within `seconds`), and returns the output so far.
        @discardableResult
        package func waitForOutput(containing text: String, seconds: Double = 120) async throws -> String {
            try await firstElement(
                "\(CommandLineTool.name)'s output to contain \(String(reflecting: text))", in: output,
                seconds: seconds
            ) { $0.contains(text) }
        }

        /// Sends `signal` to the process.
        package func send(_ signal: Int32) {
            kill(process.processIdentifier, signal)
        }

        /// Waits for the process to exit (within `seconds`; then it is terminated and this throws).
        package func wait(seconds: Double = 120) async throws -> Result {
            let status: Int32
            do {
                status = try await firstElement("\(CommandLineTool.name) to exit", in: exits, seconds: seconds) { _ in
                    true
                }
            } catch {
                let running = process.isRunning
                process.terminate()
                throw StillRunning(
                    wasRunning: running, standardOutput: outputText.value, standardError: errorText.value)
            }
            // The pipes are read to their end before the exit is reported.
            return Result(status: status, standardOutput: outputText.value, standardError: errorText.value)
        }
    }

    /// Starts the tool with `arguments` and the environment changed by `environment`, its output read through
    /// pipes as it comes.
    package func start(_ arguments: [String], environment: [String: String?] = [:]) throws -> Running {
        var variables = ProcessInfo.processInfo.environment
        for (name, value) in environment {
            variables[name] = value
        }
        let process = Process()
        process.executableURL = url
        process.arguments = arguments
        process.environment = variables
        let outputPipe = Pipe()
        let errorPipe = Pipe()
        process.standardOutput = outputPipe
        process.standardError = errorPipe
        let outputText = LockedText()
        let errorText = LockedText()
        let (output, outputContinuation) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .bufferingNewest(1))
        let (exits, exited) = AsyncStream.makeStream(of: Int32.self, bufferingPolicy: .bufferingNewest(1))
        // The exit is reported once the process has ended and both pipes reached their end (a handler may
        // see the end more than once: each part counts once).
        let ended = EndedParts()
        let report: @Sendable (String) -> Void = { part in
            if ended.insert(part) {
                exited.yield(process.terminationStatus)
                exited.finish()
            }
        }
        outputPipe.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty {
                handle.readabilityHandler = nil
                outputContinuation.finish()
                report("out")
            } else {
                outputContinuation.yield(outputText.append(String(decoding: data, as: UTF8.self)))
            }
        }
        errorPipe.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty {
                handle.readabilityHandler = nil
                report("err")
            } else {
                _ = errorText.append(String(decoding: data, as: UTF8.self))
            }
        }
        process.terminationHandler = { _ in report("exit") }
        try process.run()
        return Running(
            process: process, output: output, outputText: outputText, errorText: errorText, exits: exits)
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

/// The parts of a run that ended (its output, its error output, the process), from several threads.
final class EndedParts: @unchecked Sendable {
    // Safe: `parts` and `reported` are only read and written while `lock` is held.
    private let lock = NSLock()
    private var parts: Set<String> = []
    private var reported = false

    /// Records `part`; `true` exactly once, when the three parts have ended.
    func insert(_ part: String) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        parts.insert(part)
        guard parts.count == 3, !reported else { return false }
        reported = true
        return true
    }
}

/// Text that grows from several threads.
final class LockedText: @unchecked Sendable {
    // Safe: `text` is only read and written while `lock` is held.
    private let lock = NSLock()
    private var text = ""

    /// Appends `part` and returns the whole text.
    func append(_ part: String) -> String {
        lock.lock()
        defer { lock.unlock() }
        text += part
        return text
    }

    var value: String {
        lock.lock()
        defer { lock.unlock() }
        return text
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
