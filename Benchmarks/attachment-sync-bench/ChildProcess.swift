import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// This executable run again as a child process (for a scenario whose peak memory must be its own).
enum ChildProcess {
    /// Runs this executable with `arguments` and returns the fields after `resultPrefix` on the first line of
    /// its standard output that starts with it. Throws a ``BenchmarkFailure`` naming `what` when the child
    /// fails (its standard error is this process's) or prints no such line.
    static func run(_ arguments: [String], resultPrefix: String, what: String) async throws -> [Substring] {
        let outputURL = FileManager.default.temporaryDirectory.appendingPathComponent(
            "attachment-sync-bench-child-\(UUID().uuidString).out")
        let output = open(outputURL.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard output >= 0 else { throw BenchmarkFailure("cannot create \(outputURL.path) for the \(what) child") }
        defer {
            close(output)
            try? FileManager.default.removeItem(at: outputURL)
        }
        let status = try await Spawn.run(
            selfExecutable().path, arguments, environment: ProcessInfo.processInfo.environment, output: output,
            limit: nil, what: "the \(what) child")
        let text = (try? String(contentsOf: outputURL, encoding: .utf8)) ?? ""
        guard status == 0, let line = text.split(separator: "\n").first(where: { $0.hasPrefix(resultPrefix) })
        else { throw BenchmarkFailure("the \(what) child failed with status \(status) (its error is printed above)") }
        return Array(line.split(separator: " ").dropFirst())
    }

    /// This executable's file.
    static func selfExecutable() -> URL {
        #if os(Linux)
            if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
                return URL(fileURLWithPath: path)
            }
            return URL(fileURLWithPath: CommandLine.arguments[0])
        #else
            return Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])
        #endif
    }
}
