import Foundation
import Testing

/// Runs the `attachment-sync` executable as a child process, the way a user runs it.
///
/// The test target cannot import an executable target, so these tests exercise the built binary. They look
/// for it next to the test bundle, in the build folder the tests were built in (`swift build --build-tests`
/// builds every product, the executable included), so a stale binary from another build folder is never
/// picked up.
@Suite("attachment-sync demo")
struct DemoCommandTests {
    @Test("converges with a handful of photos and prints the final table")
    func demoConverges() async throws {
        // Given the built command line tool
        let tool = try CommandLineTool.locate()

        // When the demo runs with five photos
        let result = try await tool.run(["demo", "--count", "5", "--timeout", "20"])

        // Then it exits cleanly, having converged, and reports the states per device
        #expect(result.status == 0, "stderr: \(result.standardError)")
        #expect(result.standardOutput.contains("demo converged"))
        #expect(result.standardOutput.contains("queuedDownload  queuedUpload  queuedDelete  synced  archived"))
        let tableRows = result.standardOutput.split(separator: "\n").map { $0.split(separator: " ") }
        // A keeps 4 synced photos; B keeps 4 synced and the deleted one archived; the remote has 4 files.
        #expect(tableRows.contains { $0.starts(with: ["A", "0", "0", "0", "4", "0", "4"]) })
        #expect(tableRows.contains { $0.starts(with: ["B", "0", "0", "0", "4", "1", "5"]) })
        #expect(tableRows.contains { $0.starts(with: ["remote", "-", "-", "-", "-", "-", "4"]) })
        #expect(result.standardOutput.contains("removed "))
    }

    @Test("with --on-demand, B records every photo, fetches three with progress, purges one")
    func demoOnDemand() async throws {
        // Given the built command line tool
        let tool = try CommandLineTool.locate()

        // When the on-demand demo runs with six photos
        let result = try await tool.run(["demo", "--on-demand", "--count", "6", "--timeout", "20"])

        // Then B holds six records but only the fetched, unpurged content: the archived first photo and one
        #expect(result.status == 0, "stderr: \(result.standardError)")
        #expect(result.standardOutput.contains("demo converged"))
        #expect(result.standardOutput.contains("6/6 records, remote-only"))
        #expect(result.standardOutput.contains("100%"))
        #expect(result.standardOutput.contains("its record stays, the remote copy too"))
        let tableRows = result.standardOutput.split(separator: "\n").map { $0.split(separator: " ") }
        #expect(tableRows.contains { $0.starts(with: ["A", "0", "0", "0", "5", "0", "5"]) })
        #expect(tableRows.contains { $0.starts(with: ["B", "0", "0", "0", "5", "1", "2"]) })
        #expect(tableRows.contains { $0.starts(with: ["remote", "-", "-", "-", "-", "-", "5"]) })
    }

    @Test("rejects a count below one with a clear message and a non-zero status")
    func demoRejectsZeroCount() async throws {
        // Given the built command line tool
        let tool = try CommandLineTool.locate()

        // When the demo is asked for no photos at all
        let result = try await tool.run(["demo", "--count", "0"])

        // Then it refuses before doing anything, saying why
        #expect(result.status != 0)
        #expect(result.standardError.contains("--count must be at least 1"), "stderr: \(result.standardError)")
        #expect(!result.standardOutput.contains("demo converged"))
    }
}

/// The `attachment-sync` executable of the build the tests belong to.
struct CommandLineTool {
    /// What a finished run printed and how it exited.
    struct Result: Sendable {
        var status: Int32
        var standardOutput: String
        var standardError: String
    }

    static let name = "attachment-sync"

    let url: URL

    /// Finds the executable in the build folder of the running tests.
    ///
    /// On Linux the tests run as `<build>/debug/<Package>PackageTests.xctest`, an executable; on Apple
    /// platforms the `.xctest` bundle inside `<build>/debug` is loaded by a runner. Either way the folder that
    /// holds the test product holds the `attachment-sync` executable too.
    static func locate() throws -> CommandLineTool {
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
        var seen: Set<String> = []
        folders = folders.filter { seen.insert($0.standardizedFileURL.path).inserted }
        for folder in folders {
            let candidate = folder.appendingPathComponent(name)
            if FileManager.default.isExecutableFile(atPath: candidate.path) {
                return CommandLineTool(url: candidate)
            }
        }
        throw ToolNotFound(searched: folders.map(\.path))
    }

    /// Runs the tool with `arguments`, its output going to files (so a full pipe can never block it), and
    /// waits for it to exit. The demo bounds itself with `--timeout`; the deadline here only turns a hang
    /// into a failure, and terminates the process.
    func run(_ arguments: [String], seconds: Double = 30) async throws -> Result {
        let folder = try TemporaryDirectory()
        let outputURL = folder.url.appendingPathComponent("stdout")
        let errorURL = folder.url.appendingPathComponent("stderr")
        try Data().write(to: outputURL)
        try Data().write(to: errorURL)
        let output = try FileHandle(forWritingTo: outputURL)
        let error = try FileHandle(forWritingTo: errorURL)
        defer {
            try? output.close()
            try? error.close()
        }

        let process = Process()
        process.executableURL = url
        process.arguments = arguments
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
            status = try await withDeadline(seconds: seconds, "\(Self.name) \(arguments.joined(separator: " "))") {
                for await status in exits { return status }
                throw StreamEnded()
            }
        } catch {
            process.terminate()
            throw error
        }
        return Result(
            status: status,
            standardOutput: String(decoding: try Data(contentsOf: outputURL), as: UTF8.self),
            standardError: String(decoding: try Data(contentsOf: errorURL), as: UTF8.self)
        )
    }
}

/// The executable is not where the tests expect it.
struct ToolNotFound: Error, CustomStringConvertible {
    let searched: [String]
    var description: String {
        "\(CommandLineTool.name) was not found next to the test product (looked in: "
            + (searched.isEmpty ? "no candidate folder" : searched.joined(separator: ", "))
            + "). Build every product before running the tests: `swift build --build-tests`, then "
            + "`swift test --skip-build` with the same --scratch-path."
    }
}
