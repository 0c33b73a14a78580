import Foundation

/// This executable run again as a child process (for a scenario whose peak memory must be its own).
enum ChildProcess {
    /// Runs this executable with `arguments` and returns the fields after `resultPrefix` on the first line of
    /// its standard output that starts with it. Throws a ``BenchmarkFailure`` naming `what` when the child
    /// fails (its standard error is this process's) or prints no such line.
    static func run(_ arguments: [String], resultPrefix: String, what: String) async throws -> [Substring] {
        let process = Process()
        process.executableURL = selfExecutable()
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        let (exits, exited) = AsyncStream.makeStream(of: Int32.self)
        process.terminationHandler = { process in
            exited.yield(process.terminationStatus)
            exited.finish()
        }
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        var status: Int32 = -1
        for await code in exits { status = code }
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
