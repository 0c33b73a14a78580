import Foundation

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
