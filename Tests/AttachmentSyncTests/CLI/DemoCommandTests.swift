import Foundation
import TestSupport
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

    @Test("with --bwlimit, both devices are capped and the transfer lines show a rate that keeps to the cap")
    func demoBandwidthLimit() async throws {
        // Given the built command line tool
        let tool = try CommandLineTool.locate()

        // When the demo runs with transfers capped at 256 KiB/s each way
        let result = try await tool.run(["demo", "--count", "4", "--bwlimit", "256K", "--timeout", "60"])

        // Then it converges, says so, and neither direction went faster than the cap allows (a tenth of a
        // second's burst aside)
        #expect(result.status == 0, "stderr: \(result.standardError)")
        #expect(result.standardOutput.contains("capped at up 256 KiB/s, down 256 KiB/s on each device (--bwlimit)"))
        #expect(result.standardOutput.contains("demo converged"))
        for prefix in ["A  uploaded 4/4", "B  downloaded 4/4"] {
            let line = try #require(
                result.standardOutput.split(separator: "\n").last { $0.hasPrefix(prefix) }, "\(prefix)")
            let rate = try #require(
                line.split(separator: ", ").last?.split(separator: " ").first.flatMap { Double($0) })
            #expect(line.hasSuffix("KiB/s"), "\(line)")
            #expect(rate <= 256 * 1.3, "\(line)")
        }

        // And a rate that is not one is refused before anything runs
        let refused = try await tool.run(["demo", "--bwlimit", "fast"])
        #expect(refused.status != 0)
        #expect(refused.standardError.contains("--bwlimit must be a positive number of bytes per second"))
    }

    @Test("with --outage, B's downloads wait untried while its network is down, then go when it is back")
    func demoOutage() async throws {
        // Given the built command line tool
        let tool = try CommandLineTool.locate()

        // When the demo runs with a simulated outage on B
        let result = try await tool.run(["demo", "--count", "4", "--outage", "--timeout", "30"])

        // Then B waited, paused for the network without trying anything, and converged once it was back
        #expect(result.status == 0, "stderr: \(result.standardError)")
        let output = result.standardOutput
        #expect(output.contains("B  paused for network: 4/4 downloads wait, 0 tried"))
        let paused = try #require(output.range(of: "B  paused for network"))
        let back = try #require(output.range(of: "B  network back"))
        let downloaded = try #require(output.range(of: "B  downloaded 4/4"))
        #expect(paused.lowerBound < back.lowerBound && back.lowerBound < downloaded.lowerBound)
        #expect(output.contains("demo converged"))

        // And --outage with --on-demand is refused, saying why
        let refused = try await tool.run(["demo", "--outage", "--on-demand"])
        #expect(refused.status != 0)
        #expect(refused.standardError.contains("--outage shows B's eager downloads"))
    }

    @Test("rejects a count below one with a clear message and a non-zero status")
    func demoRejectsZeroCount() async throws {
        // Given the built command line tool
        let tool = try CommandLineTool.locate()

        // When the demo is asked for no photos at all
        let result = try await tool.run(["demo", "--count", "0"])

        // Then it refuses before doing anything, saying why
        #expect(result.status != 0)
        #expect(result.standardError.contains("--count must be between 1 and 1000"), "stderr: \(result.standardError)")
        #expect(!result.standardOutput.contains("demo converged"))
    }

    @Test("a timeout too long for any clock is refused or clamped, never a crash")
    func demoSurvivesAbsurdTimeout() async throws {
        let tool = try CommandLineTool.locate()
        let result = try await tool.run(["demo", "--count", "1", "--timeout", "1e300"])
        #expect(result.status == 0, "stderr: \(result.standardError)")
        #expect(result.standardOutput.contains("demo converged"), "stdout: \(result.standardOutput)")
    }
}
