import Foundation
import TestSupport

/// The scenarios' child processes (the tools they compare against, this executable run again for a scenario
/// whose peak memory must be its own), started by the tests' `posix_spawn` runner (Tests/TestSupport, which
/// needs nothing but Foundation).
extension ChildProcess {
    /// Runs `executable` with `arguments` and exactly `environment`, in `directory` (`nil`: this process's),
    /// to its end, and returns its exit status; `what` names it in errors. Its standard output and error go
    /// where `standardOutput` and `standardError` say (the default: this process's own).
    ///
    /// A child still running after `limit` (`nil`: no limit) or when the task is cancelled is killed; that and
    /// an end by a signal throw a ``BenchmarkFailure``.
    static func run(
        _ executable: String, _ arguments: [String], environment: [String: String], directory: String? = nil,
        standardOutput: Output = .inherit, standardError: Output = .inherit, limit: Duration?, what: String
    ) async throws -> Int32 {
        let child: ChildProcess
        do {
            child = try ChildProcess(
                executable, arguments, environment: environment, directory: directory, standardOutput: standardOutput,
                standardError: standardError)
        } catch {
            throw BenchmarkFailure("cannot start \(what): \(error)")
        }
        return try await child.exitStatus(within: limit, what: what)
    }

    /// Runs this executable with `arguments` and returns the fields after `resultPrefix` on the first line of
    /// its standard output that starts with it. Throws a ``BenchmarkFailure`` naming `what` when the child
    /// fails (its standard error is this process's) or prints no such line.
    static func runThisExecutable(_ arguments: [String], resultPrefix: String, what: String) async throws
        -> [Substring]
    {
        let child: ChildProcess
        do {
            child = try ChildProcess(
                thisExecutable().path, arguments, standardOutput: .capture(), standardError: .inherit)
        } catch {
            throw BenchmarkFailure("cannot start the \(what) child: \(error)")
        }
        let status = try await child.exitStatus(within: nil, what: "the \(what) child")
        guard status == 0,
            let line = child.capturedOutput.split(separator: "\n").first(where: { $0.hasPrefix(resultPrefix) })
        else { throw BenchmarkFailure("the \(what) child failed with status \(status) (its error is printed above)") }
        return Array(line.split(separator: " ").dropFirst())
    }

    /// The `name=value` fields of a child's result line, by name (a field without `=` is left out).
    static func namedValues(_ fields: [Substring]) -> [String: Substring] {
        var values: [String: Substring] = [:]
        for field in fields {
            let parts = field.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { values[String(parts[0])] = parts[1] }
        }
        return values
    }

    /// This executable's file.
    static func thisExecutable() -> URL {
        #if os(Linux)
            if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
                return URL(fileURLWithPath: path)
            }
            return URL(fileURLWithPath: CommandLine.arguments[0])
        #else
            return Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])
        #endif
    }

    /// Waits for the end, killing the child after `limit` or when the task is cancelled, and returns its exit
    /// status; an end by a signal or the limit throws a ``BenchmarkFailure`` naming `what`.
    private func exitStatus(within limit: Duration?, what: String) async throws -> Int32 {
        let termination: Termination
        do {
            if let limit {
                let (seconds, attoseconds) = limit.components
                termination = try await wait(seconds: Double(seconds) + Double(attoseconds) / 1e18)
            } else {
                termination = try await wait()
            }
        } catch {
            kill()
            // The child's own thread reaps it; this waits for that, unless the task was cancelled.
            _ = try? await wait(seconds: 60)
            throw error is DeadlineExceeded
                ? BenchmarkFailure("\(what) did not finish within \(limit ?? .zero)") : error
        }
        switch termination {
        case .exited(let status): return status
        case .signaled(let signal): throw BenchmarkFailure("\(what) was ended by signal \(signal)")
        }
    }
}
