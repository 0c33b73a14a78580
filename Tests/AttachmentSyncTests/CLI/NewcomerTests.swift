import AttachmentSync
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What someone trying the CLI for the first time meets, following the README: bounds on what the demo
/// accepts, a timeout that holds, Ctrl-C that cleans up, the same units and size syntax everywhere, errors
/// that say what to do and say it once.
@Suite("attachment-sync for a newcomer", .cleansUp)
struct NewcomerTests {
    /// The folder the demo says it works in (`working folder PATH`).
    static func workingFolder(_ output: String) -> String? {
        output.split(separator: "\n").first { $0.hasPrefix("working folder ") }
            .map { String($0.dropFirst("working folder ".count)).trimmingCharacters(in: .whitespaces) }
    }

    @Test("demo --count is bounded: an absurd count is refused at once, naming the limit; -1 is read as a number")
    func boundedCount() async throws {
        let tool = try CommandLineTool.locate()
        for count in ["100000000", "1001", "-1", "0"] {
            let result = try await tool.run(["demo", "--count", count], seconds: 30)
            #expect(result.status == 64, "\(count): \(result.standardError)")
            #expect(
                result.standardError.contains("--count must be between 1 and 1000"), "\(count): \(result.standardError)"
            )
            #expect(result.standardError.contains("not \(count)"), "\(count): \(result.standardError)")
            #expect(!result.standardError.contains("Missing value"), "\(count)")
            #expect(!result.standardOutput.contains("AttachmentSync demo"), "nothing ran")
        }
        let negative = try await tool.run(["demo", "--timeout", "-5"], seconds: 30)
        #expect(negative.standardError.contains("--timeout must be a positive number of seconds, not -5"))
    }

    @Test("demo --timeout covers capturing the photos: it stops there, saying so, and cleans up")
    func timeoutCoversCapture() async throws {
        let tool = try CommandLineTool.locate()
        // A thousand photos (110 MiB, each saved durably) take seconds to capture on any machine; the deadline
        // is one. (On a machine so loaded that starting the queues takes that long, it stops even earlier.)
        let result = try await tool.run(["demo", "--count", "1000", "--timeout", "1"], seconds: 120)
        #expect(result.status == 1, "stderr: \(result.standardError)")
        #expect(
            result.standardError.contains("timed out after 1 s while A captured ")
                || result.standardError.contains("timed out after 1 s while the devices started"),
            "stderr: \(result.standardError)")
        #expect(!result.standardOutput.contains("captured 1000/1000"), "capture stopped at the deadline")
        #expect(!result.standardOutput.contains("demo converged"))
        let folder = try #require(Self.workingFolder(result.standardOutput))
        #expect(!FileManager.default.fileExists(atPath: folder), "the working folder was removed")
    }

    @Test("Ctrl-C (SIGINT) and SIGTERM stop the demo, remove its working folder and exit 130 and 143")
    func signalsCleanUp() async throws {
        let tool = try CommandLineTool.locate()
        for (signal, status) in [(SIGINT, Int32(130)), (SIGTERM, Int32(143))] {
            // A thousand photos of 20 to 200 KiB capped at 1 KiB/s take days to upload: the demo cannot have
            // finished when the signal comes, however slowly this test is scheduled.
            let running = try tool.start(["demo", "--count", "1000", "--bwlimit", "1K", "--timeout", "600"])
            let output = try await running.waitForOutput(containing: "1. A completes 1000 checklist items")
            let folder = try #require(Self.workingFolder(output))
            #expect(FileManager.default.fileExists(atPath: folder))
            running.send(signal)
            let result = try await running.wait()
            #expect(result.status == status, "stdout: \(result.standardOutput)\nstderr: \(result.standardError)")
            #expect(result.standardError.contains("interrupted"), "stderr: \(result.standardError)")
            #expect(!result.standardOutput.contains("demo converged"))
            #expect(result.standardOutput.contains("removed \(folder)"), "stdout: \(result.standardOutput)")
            #expect(!FileManager.default.fileExists(atPath: folder), "the working folder was removed")
        }
    }

    @Test("rates are in the binary units --bwlimit takes: a 512K cap reads 512 KiB/s, never kB/s")
    func binaryRates() async throws {
        let result = try await CommandLineTool.locate().run(
            ["demo", "--count", "3", "--bwlimit", "512K", "--timeout", "60"])
        #expect(result.status == 0, "stderr: \(result.standardError)")
        #expect(result.standardOutput.contains("capped at up 512 KiB/s, down 512 KiB/s"), "\(result.standardOutput)")
        #expect(!result.standardOutput.contains("kB") && !result.standardOutput.contains("MB/s"))
    }

    @Test("status --budget takes the size syntax --bwlimit takes (1M is 1 MiB), and refuses others clearly")
    func budgetSizes() async throws {
        let folder = try TemporaryDirectory()
        let path = folder.path("app.sqlite")
        try await HostileSizesTests.makeDatabase(
            at: path,
            rows: [
                .init(id: "a", state: .synced, size: .integer(3 << 20), localURI: "a.bin"),
                .init(id: "b", state: .queuedDownload, size: .null),
            ])
        let tool = try CommandLineTool.locate()
        for (budget, bytes) in [
            ("1M", 1 << 20), ("1m", 1 << 20), ("512K", 512 << 10), ("2G", 2 << 30), ("300000", 300_000),
        ] {
            let result = try await tool.run(["status", path, "--json", "--budget", budget])
            #expect(result.status == 0, "\(budget): \(result.standardError)")
            let document = try #require(
                try JSONSerialization.jsonObject(with: Data(result.standardOutput.utf8)) as? [String: Any])
            #expect((document["cache"] as? [String: Any])?["budget"] as? Int == bytes, "\(budget)")
        }
        let text = try await tool.run(["status", path, "--budget", "1M"])
        #expect(text.standardOutput.contains("of a 1.0 MiB budget"), "\(text.standardOutput)")
        #expect(text.standardOutput.contains("to download           1         0 B  (1 of unknown size: not counted)"))
        for bad in ["-1", "1.5.5M", "fast", "1MB", "10000000000G"] {
            let refused = try await tool.run(["status", path, "--budget", bad])
            #expect(refused.status == 64, "\(bad)")
            #expect(refused.standardError.contains("--budget must be"), "\(bad): \(refused.standardError)")
        }
    }

    @Test("a file that is not a database is named in the error")
    func notADatabaseNamesThePath() async throws {
        let folder = try TemporaryDirectory()
        let path = folder.path("notes.sqlite")
        try Data("these are notes, not a database\n".utf8).write(to: URL(fileURLWithPath: path))
        let tool = try CommandLineTool.locate()
        let remote = folder.path("remote")
        try FileManager.default.createDirectory(atPath: remote, withIntermediateDirectories: true)
        for arguments in [
            ["status", path], ["gc", "--remote", remote, "--db", path], ["verify", path, "--dir", remote],
        ] {
            let result = try await tool.run(arguments)
            #expect(result.status == 1, "\(arguments)")
            #expect(result.standardError.contains(path), "\(arguments): \(result.standardError)")
            #expect(result.standardError.contains("not a database"), "\(arguments): \(result.standardError)")
        }
    }

    @Test("every command's help reads as prose: no runs of spaces inside its text")
    func helpWithoutStraySpaces() async throws {
        let tool = try CommandLineTool.locate()
        for command in ["demo", "status", "verify", "gc"] {
            let help = try await tool.run([command, "--help"])
            #expect(help.status == 0)
            // The argument and option tables pad their columns; the prose before them must not.
            let prose =
                help.standardOutput.components(separatedBy: "ARGUMENTS:").first?
                .components(separatedBy: "OPTIONS:").first ?? ""
            for line in prose.split(separator: "\n") {
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                #expect(!trimmed.contains("   "), "\(command) --help: \(String(reflecting: line))")
            }
        }
    }
}
