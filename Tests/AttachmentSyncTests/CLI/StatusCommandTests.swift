import AttachmentSync
import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

/// `attachment-sync status`, run as a user runs it, on a database a real queue left in a known state.
@Suite("attachment-sync status", .cleansUp)
struct StatusCommandTests {
    /// A device with: 2 synced uploads (one pinned), 1 upload waiting for a retry, 1 upload given up (its
    /// file the only copy), and 1 on-demand record without content. The queue is left open.
    func preparedDevice() async throws -> QueueHarness {
        let device = try QueueHarness {
            $0.retryBackoff = RetryBackoff(initialDelay: .seconds(60), maximumDelay: .seconds(60), jitter: false)
            $0.maxAttempts = 2
        }
        let remote = try device.memoryRemote
        let big = try await device.queue.saveFile(
            data: testBytes(3_000), mediaType: nil, fileExtension: "bin", id: "big")
        _ = try await device.queue.saveFile(data: testBytes(1_000), mediaType: nil, fileExtension: "bin", id: "small")
        try await device.queue.syncNow()
        try await device.queue.pin(attachmentId: big.id)
        await remote.failNext(.upload, count: 3, with: InjectedFailure("server said no"))
        _ = try await device.queue.saveFile(data: testBytes(500), mediaType: nil, fileExtension: "bin", id: "doomed")
        try await device.queue.syncNow()  // attempt 1 of 2: waits a minute
        await device.clock.advance(by: .seconds(61))
        try await device.queue.syncNow()  // attempt 2 of 2: given up
        _ = try await device.queue.saveFile(data: testBytes(200), mediaType: nil, fileExtension: "bin", id: "waiting")
        try await device.queue.syncNow()  // attempt 1: waits a minute
        return device
    }

    @Test("--json reports states, bytes, retries, give-ups, the cache and the largest attachments")
    func json() async throws {
        let device = try await preparedDevice()
        let path = device.folder.path("app.sqlite")
        let result = try await CommandLineTool.locate().run(["status", path, "--json", "--budget", "1000"])
        #expect(result.status == 0, "stderr: \(result.standardError)")
        let document = try #require(
            try JSONSerialization.jsonObject(with: Data(result.standardOutput.utf8)) as? [String: Any])
        #expect(document["records"] as? Int == 4)
        let states = try #require(document["states"] as? [String: [String: Int]])
        let sized = ["unknownSizeCount": 0, "invalidSizeCount": 0]
        #expect(states["synced"] == sized.merging(["count": 2, "bytes": 4_000]) { $1 })
        #expect(states["queuedUpload"] == sized.merging(["count": 1, "bytes": 200]) { $1 })
        #expect(states["archived"] == sized.merging(["count": 1, "bytes": 500]) { $1 })
        #expect(states["queuedDownload"] == sized.merging(["count": 0, "bytes": 0]) { $1 }, "every state is present")
        #expect((document["invalidSizes"] as? [Any])?.isEmpty == true)
        let retries = try #require(document["waitingForRetry"] as? [[String: Any]])
        #expect(retries.map { $0["id"] as? String } == ["waiting"])
        #expect(retries.first?["attempts"] as? Int == 1)
        #expect((retries.first?["lastError"] as? String)?.contains("server said no") == true)
        #expect(retries.first?["nextAttemptAt"] is String)
        let givenUp = try #require(document["givenUp"] as? [[String: Any]])
        #expect(givenUp.map { $0["id"] as? String } == ["doomed"])
        #expect(givenUp.first?["isLocalOnly"] as? Bool == true)
        let cache = try #require(document["cache"] as? [String: Any])
        #expect(cache["budget"] as? Int == 1_000)
        #expect(cache["usedBytes"] as? Int == 4_700)
        #expect(cache["pinnedBytes"] as? Int == 3_000)
        #expect(cache["notUploadedBytes"] as? Int == 700)
        #expect(cache["keptBytes"] as? Int == 1_000)
        #expect(cache["cannotMeetBudget"] as? Bool == true)
        let local = try #require(document["localOnly"] as? [String: Int])
        #expect(local == ["count": 2, "bytes": 700])
        let largest = try #require(document["largest"] as? [[String: Any]])
        #expect(largest.map { $0["id"] as? String } == ["big", "small", "doomed", "waiting"])
        await device.queue.close()
    }

    @Test("the table for people, read while the app's queue has the database open, changes nothing")
    func humanWhileRunning() async throws {
        let device = try await preparedDevice()
        try await device.queue.startSync()
        let path = device.folder.path("app.sqlite")
        let before = try await device.db.getAll(sql: "SELECT * FROM attachments ORDER BY id") {
            try $0.getString(name: "id") + "|" + String(try $0.getInt(name: "state"))
                + "|" + String(try $0.getInt64Optional(name: "timestamp") ?? 0)
        }
        let result = try await CommandLineTool.locate().run(["status", path, "--largest", "2"])
        #expect(result.status == 0, "stderr: \(result.standardError)")
        let output = result.standardOutput
        #expect(output.contains("4 attachments in table attachments of \(path)"))
        #expect(output.contains("waiting for a retry (1):"))
        #expect(output.contains("  waiting  to upload  attempt 1  next "))
        #expect(output.contains("given up (1; retry them from the app):"))
        #expect(output.contains("doomed  to upload after 2 attempts  (only copy on this device)"))
        #expect(output.contains("only on this device: 2 attachments, 700 B never uploaded"))
        #expect(output.split(separator: "\n").contains { $0.hasPrefix("synced") && $0.hasSuffix("3.9 KiB") })
        #expect(!output.contains("budget"), "no budget given, none reported")
        #expect(output.contains("on this device: 4.6 KiB\n"))
        let largest = output.components(separatedBy: "largest:\n").last ?? ""
        #expect(largest.split(separator: "\n").count == 2)
        let after = try await device.db.getAll(sql: "SELECT * FROM attachments ORDER BY id") {
            try $0.getString(name: "id") + "|" + String(try $0.getInt(name: "state"))
                + "|" + String(try $0.getInt64Optional(name: "timestamp") ?? 0)
        }
        #expect(after == before)
        await device.queue.close()
    }

    @Test("a missing file, a missing table and bad arguments exit non-zero and say why")
    func failures() async throws {
        let folder = try TemporaryDirectory()
        let tool = try CommandLineTool.locate()
        let missing = try await tool.run(["status", folder.path("none.sqlite")])
        #expect(missing.status == 1)
        #expect(missing.standardError.contains("no database file at"))
        #expect(!FileManager.default.fileExists(atPath: folder.path("none.sqlite")), "nothing was created")

        let db = try LocalDatabase(
            path: folder.path("other.sqlite"), schema: Schema(tables: [Table(name: "notes", columns: [.text("x")])]))
        try await db.close()
        let noTable = try await tool.run(["status", folder.path("other.sqlite")])
        #expect(noTable.status == 1)
        #expect(noTable.standardError.contains("no table \"attachments\""))
        let wrongTable = try await tool.run(["status", folder.path("other.sqlite"), "--table", "notes"])
        #expect(wrongTable.status == 1)
        #expect(wrongTable.standardError.contains("lacks the attachment columns"))
        let badName = try await tool.run(["status", folder.path("other.sqlite"), "--table", "a b"])
        #expect(badName.status == 1)
        #expect(badName.standardError.contains("cannot name a table"))
        let badBudget = try await tool.run(["status", folder.path("other.sqlite"), "--budget=-5"])
        #expect(badBudget.status == 64)
    }
}
