import Foundation
import TestSupport

/// A command-line program a scenario compares against (`rclone`, `aws`), found on the `PATH`.
struct ExternalTool: Sendable {
    /// The executable.
    let url: URL

    /// The longest one run of a tool may take before it is killed and the scenario fails (the slowest, the
    /// AWS CLI's 2,000 uploads, takes about 15 s here).
    static let timeLimit = Duration.seconds(300)

    /// Finds `name` on the `PATH`, or throws a ``BenchmarkFailure`` that says how to install it. The benchmark
    /// installs nothing itself.
    static func locate(_ name: String, install: String) throws -> ExternalTool {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for folder in path.split(separator: ":") where !folder.isEmpty {
            let candidate = URL(fileURLWithPath: String(folder)).appendingPathComponent(name)
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return ExternalTool(url: candidate) }
        }
        throw BenchmarkFailure("\(name) is not installed (not on the PATH); install it with `\(install)`")
    }

    /// Finds every tool of `tools` (name, how to install it), or throws one ``BenchmarkFailure`` naming all
    /// that are missing.
    static func locateAll(_ tools: [(name: String, install: String)]) throws -> [ExternalTool] {
        let found = tools.map { tool in Result { try locate(tool.name, install: tool.install) } }
        let missing = found.compactMap { result -> String? in
            guard case .failure(let error) = result else { return nil }
            return "\(error)"
        }
        guard missing.isEmpty else { throw BenchmarkFailure(missing.joined(separator: "; ")) }
        return try found.map { try $0.get() }
    }

    /// This process's environment without the variables that would change how the AWS tools behave (`AWS_*`,
    /// `RCLONE_*`: a user's profile, CA bundle or defaults), plus `extra`.
    static func cleanEnvironment(adding extra: [String: String]) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment.filter {
            !$0.key.hasPrefix("AWS_") && !$0.key.hasPrefix("RCLONE_")
        }
        environment.merge(extra) { _, new in new }
        return environment
    }

    /// Runs the tool with `arguments` and `environment` in `folder`, timing it from launch to exit (wall
    /// clock). Its standard output and error go to files in `folder` (`<label>.out`, `<label>.err`), and a
    /// non-zero exit throws a ``BenchmarkFailure`` with the end of its error output.
    func run(
        _ arguments: [String], environment: [String: String], in folder: WorkFolder, label: String
    ) async throws -> Duration {
        let errPath = folder.path("\(label).err")
        // A tool that hangs (a connection the server never answers) is killed and fails the run instead of
        // stalling it.
        let (status, elapsed) = try await measure {
            try await ChildProcess.run(
                url.path, arguments, environment: environment, directory: folder.url.path,
                standardOutput: .file(folder.path("\(label).out")), standardError: .file(errPath),
                limit: Self.timeLimit, what: "\(url.lastPathComponent) (\(label))")
        }
        guard status == 0 else {
            let errors = (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? ""
            throw BenchmarkFailure(
                "\(url.lastPathComponent) (\(label)) exited with status \(status): "
                    + String(errors.suffix(600)).trimmingCharacters(in: .whitespacesAndNewlines))
        }
        return elapsed
    }
}
