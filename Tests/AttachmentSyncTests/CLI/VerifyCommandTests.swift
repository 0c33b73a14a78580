import AttachmentSync
import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

/// `attachment-sync verify`, run as a user runs it, on files and records a real queue made, then damaged by
/// hand as a disk or a person would.
@Suite("attachment-sync verify", .cleansUp)
struct VerifyCommandTests {
    @Test("a clean device verifies clean; damaged, missing and stray files are each found and exit 2")
    func findsWhatDisagrees() async throws {
        let device = try QueueHarness()
        let saved = try await device.queue.saveFile(
            data: testBytes(2_000), mediaType: nil, fileExtension: "bin", id: "good")
        let corrupt = try await device.queue.saveFile(
            data: testBytes(1_000), mediaType: nil, fileExtension: "bin", id: "corrupt")
        let truncated = try await device.queue.saveFile(
            data: testBytes(1_000), mediaType: nil, fileExtension: "bin", id: "truncated")
        try await device.queue.syncNow()
        let localOnly = try await device.queue.saveFile(
            data: testBytes(300), mediaType: nil, fileExtension: "bin", id: "gone")
        await device.queue.close()
        let db = device.folder.path("app.sqlite")
        let attachments = device.folder.path("attachments")
        let tool = try CommandLineTool.locate()

        let clean = try await tool.run(["verify", db, "--dir", attachments])
        #expect(clean.status == 0, "stderr: \(clean.standardError)")
        #expect(clean.standardOutput.contains("checked 4 files"))
        #expect(clean.standardOutput.contains("all agree with their records"))

        // Same size, one byte flipped; cut short; the only copy deleted; a stray file.
        var bytes = try Data(contentsOf: URL(fileURLWithPath: try #require(corrupt.localUri)))
        bytes[10] ^= 0xFF
        try bytes.write(to: URL(fileURLWithPath: try #require(corrupt.localUri)))
        try Data(testBytes(10)).write(to: URL(fileURLWithPath: try #require(truncated.localUri)))
        try FileManager.default.removeItem(atPath: try #require(localOnly.localUri))
        try Data("stray".utf8).write(to: URL(fileURLWithPath: attachments).appendingPathComponent("notes.txt"))
        try FileManager.default.createDirectory(
            atPath: attachments + "/thumbnails", withIntermediateDirectories: true)
        try Data("partial".utf8).write(
            to: URL(fileURLWithPath: attachments).appendingPathComponent(".attachment-sync-download-x.bin"))
        let before = try Data(contentsOf: URL(fileURLWithPath: db))

        let damaged = try await tool.run(["verify", db, "--dir", attachments])
        #expect(damaged.status == 2, "stderr: \(damaged.standardError)")
        let output = damaged.standardOutput
        #expect(output.contains("4 disagree"))
        #expect(output.contains("corrupt.bin: SHA-256 "))
        #expect(output.contains("attachment corrupt (synced); remote storage has it"))
        #expect(output.contains("truncated.bin: 10 bytes, the record says 1000"))
        #expect(output.contains("gone.bin: missing, attachment gone (to upload); this was the only copy"))
        #expect(output.contains("notes.txt: no record claims it"))
        #expect(!output.contains("good.bin"), "the intact file is not listed")
        #expect(!output.contains("thumbnails") && !output.contains(".attachment-sync-"))

        let json = try await tool.run(["verify", db, "--dir", attachments, "--json"])
        #expect(json.status == 2)
        let document = try #require(
            try JSONSerialization.jsonObject(with: Data(json.standardOutput.utf8)) as? [String: Any])
        #expect(document["clean"] as? Bool == false)
        #expect(document["checkedFiles"] as? Int == 4)
        let findings = try #require(document["findings"] as? [[String: Any]])
        #expect(findings.compactMap { $0["problem"] as? String } == ["wrongHash", "missing", "wrongSize", "unclaimed"])
        #expect(findings[2]["expected"] as? String == "1000")
        #expect(findings[2]["actual"] as? String == "10")
        #expect(findings[3]["attachmentId"] is NSNull, "an unclaimed file has no attachment")
        #expect(try Data(contentsOf: URL(fileURLWithPath: db)) == before, "verify writes nothing")
        #expect(FileManager.default.fileExists(atPath: attachments + "/notes.txt"), "nor removes anything")
        _ = saved
    }

    @Test("--remote finds what the remote lost; --repair fetches, uploads again and leaves only copies alone")
    func repairsThroughTheQueue() async throws {
        let remote = try FolderRemote()
        let remotePath = remote.path
        let files = ["corrupt", "lostRemote", "fine"].enumerated().map { ($1, testBytes(1_500 + $0 * 100)) }
        let contents = Dictionary(uniqueKeysWithValues: files)
        let device = try await remote.device(uploading: files)
        await device.queue.close()
        let db = device.folder.path("app.sqlite")
        let attachments = device.folder.path("attachments")
        var bytes = contents["corrupt"]!
        bytes[7] ^= 0x40
        try bytes.write(to: URL(fileURLWithPath: attachments + "/corrupt.bin"))
        try FileManager.default.removeItem(atPath: try remote.file(ofId: "lostRemote"))
        let tool = try CommandLineTool.locate()

        let found = try await tool.run(["verify", db, "--dir", attachments, "--remote", remotePath])
        #expect(found.status == 2, "stderr: \(found.standardError)")
        #expect(found.standardOutput.contains("corrupt.bin: SHA-256 "))
        #expect(found.standardOutput.contains("checked 3 remote files: 1 disagrees"))
        #expect(found.standardOutput.contains("remote lostRemote.bin: missing from remote storage"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: attachments + "/corrupt.bin")) == bytes, "read-only")

        let repaired = try await tool.run(["verify", db, "--dir", attachments, "--remote", remotePath, "--repair"])
        #expect(repaired.status == 0, "stdout: \(repaired.standardOutput) stderr: \(repaired.standardError)")
        #expect(repaired.standardOutput.contains("fetched 1 damaged or missing local file(s) again: corrupt"))
        #expect(repaired.standardOutput.contains("uploaded 1 file(s) remote storage had lost or damaged: lostRemote"))
        #expect(repaired.standardOutput.contains("after the repair, checked 3 files"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: attachments + "/corrupt.bin")) == contents["corrupt"])
        #expect(FileManager.default.contents(atPath: try remote.file(ofId: "lostRemote")) == contents["lostRemote"])

        let json = try await tool.run(["verify", db, "--dir", attachments, "--remote", remotePath, "--json"])
        #expect(json.status == 0)
        let document = try #require(
            try JSONSerialization.jsonObject(with: Data(json.standardOutput.utf8)) as? [String: Any])
        #expect(document["clean"] as? Bool == true)
        let remoteSection = try #require(document["remote"] as? [String: Any])
        #expect(remoteSection["checkedFiles"] as? Int == 3)
        #expect(document["repair"] is NSNull)

        let noRemote = try await tool.run(["verify", db, "--dir", attachments, "--repair"])
        #expect(noRemote.status == 64)
        #expect(noRemote.standardError.contains("--repair needs --remote"))
    }

    @Test("--state keeps the remote check: run again it reports the same findings from the file; other settings exit 1")
    func stateFileKeepsTheRemoteCheck() async throws {
        let remote = try FolderRemote()
        let device = try await remote.device(uploading: ["lost", "fine"].map { ($0, testBytes(1_200)) })
        await device.queue.close()
        let db = device.folder.path("app.sqlite")
        let attachments = device.folder.path("attachments")
        let state = device.folder.path("verify-state.sqlite")
        let lostPath = try remote.file(ofId: "lost")
        let lost = try Data(contentsOf: URL(fileURLWithPath: lostPath))
        try FileManager.default.removeItem(atPath: lostPath)
        let tool = try CommandLineTool.locate()
        let arguments = ["verify", db, "--dir", attachments, "--remote", remote.path, "--state", state]

        let first = try await tool.run(arguments)
        #expect(first.status == 2, "stderr: \(first.standardError)")
        #expect(first.standardOutput.contains("remote lost.bin: missing from remote storage"))
        // The file is back, but the finished check is reported from its state file, as it was.
        try lost.write(to: URL(fileURLWithPath: lostPath))
        let again = try await tool.run(arguments)
        #expect(again.status == 2)
        #expect(again.standardOutput == first.standardOutput)
        let fresh = try await tool.run(["verify", db, "--dir", attachments, "--remote", remote.path])
        #expect(fresh.status == 0, "stdout: \(fresh.standardOutput)")

        let other = try await tool.run(arguments + ["--encrypted"])
        #expect(other.status == 1)
        #expect(other.standardError.contains("encrypted"), "stderr: \(other.standardError)")
        let noRemote = try await tool.run(["verify", db, "--dir", attachments, "--state", state])
        #expect(noRemote.status == 64)
        #expect(noRemote.standardError.contains("--state needs --remote"))
    }

    @Test("a long check not on a terminal says how far it got on standard error, every 10,000 records")
    func progressLinesWithoutATerminal() async throws {
        let folder = try TemporaryDirectory()
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: Schema(tables: [createAttachmentTable()]))
        try await db.writeTransaction { tx in
            for index in 0..<10_500 {
                try tx.execute(
                    sql: """
                        INSERT INTO attachments (id, filename, state, timestamp, size, has_synced)
                        VALUES (?, ?, 3, 0, 10, 1)
                        """,
                    arguments: ["a\(index)", "a\(index).bin"])
            }
        }
        try await db.close()
        let remote = folder.path("remote")
        let attachments = folder.path("attachments")
        for path in [remote, attachments] {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        try Data(testBytes(10)).write(to: URL(fileURLWithPath: remote + "/a7.bin"))
        let tool = try CommandLineTool.locate()
        let run = try await tool.run(["verify", folder.path("app.sqlite"), "--dir", attachments, "--remote", remote])
        #expect(run.status == 2, "stderr: \(run.standardError.suffix(500))")
        #expect(
            run.standardOutput.contains("checked 10500 remote files: 10499 disagree"),
            "\(run.standardOutput.prefix(300))")
        #expect(
            run.standardError.contains("attachment-sync verify: checked 10000 of 10500 remote files\n"),
            "stderr: \(run.standardError.suffix(500))")
        #expect(!run.standardError.contains("\r"), "no terminal redraws in a log")
    }

    @Test("--repair says what happened: an upload that failed is counted as failed and the exit status is 1")
    func repairReportsFailures() async throws {
        for json in [false, true] {
            let remote = try FolderRemote()
            let remotePath = remote.path
            let device = try await remote.device(uploading: ["lost", "blocked", "fine"].map { ($0, testBytes(900)) })
            await device.queue.close()
            let db = device.folder.path("app.sqlite")
            let attachments = device.folder.path("attachments")
            try FileManager.default.removeItem(atPath: try remote.file(ofId: "lost"))
            // Something else took the name in the remote folder: uploading again cannot put the file there.
            try FileManager.default.removeItem(atPath: try remote.file(ofId: "blocked"))
            try FileManager.default.createDirectory(
                atPath: try remote.file(ofId: "blocked"), withIntermediateDirectories: false)

            let tool = try CommandLineTool.locate()
            let repaired = try await tool.run(
                ["verify", db, "--dir", attachments, "--remote", remotePath, "--repair"] + (json ? ["--json"] : []))
            #expect(repaired.status == 1, "stdout: \(repaired.standardOutput) stderr: \(repaired.standardError)")
            #expect(FileManager.default.contents(atPath: try remote.file(ofId: "lost")) == testBytes(900))
            #expect(device.bytesOnDisk("blocked.bin") == testBytes(900), "the only copy stays")
            if json {
                let document = try #require(
                    try JSONSerialization.jsonObject(with: Data(repaired.standardOutput.utf8)) as? [String: Any])
                let repair = try #require(document["repair"] as? [String: Any])
                #expect((repair["failed"] as? [String: String])?.keys.sorted() == ["blocked"], "\(repair)")
                #expect(repair["reuploaded"] as? [String] == ["lost"])
            } else {
                #expect(repaired.standardOutput.contains("uploaded 1 file(s) remote storage had lost or damaged: lost"))
                #expect(repaired.standardOutput.contains("repair failed for 1 file(s)"))
                #expect(repaired.standardOutput.contains("failed: blocked: "))
            }
        }
    }

    @Test("--repair refuses while the app syncs (it holds the transfer lease), and changes nothing")
    func repairWaitsForTheApp() async throws {
        let remoteFolder = try TemporaryDirectory()
        let remote = FileSystemRemoteStorage(directory: remoteFolder.path("remote"))
        // The lease's times are calendar times, which the tool's process reads from the system.
        let app = try QueueHarness(remote: remote) { $0.currentDate = { Date() } }
        let saved = try await app.queue.saveFile(data: testBytes(900), mediaType: nil, fileExtension: "bin", id: "a")
        try await app.queue.syncNow()
        try FileManager.default.removeItem(atPath: try #require(saved.localUri))
        let db = app.folder.path("app.sqlite")
        let before = try await app.state(of: "a")
        let tool = try CommandLineTool.locate()

        // The app is still syncing (its queue runs in this process, another process to the tool).
        try await app.queue.startSync()
        let refused = try await tool.run([
            "verify", db, "--dir", app.folder.path("attachments"), "--remote", remoteFolder.path("remote"), "--repair",
        ])
        #expect(refused.status == 1)
        #expect(refused.standardError.contains("holds the transfer lease"), "\(refused.standardError)")
        #expect(refused.standardError.contains("stop it"))
        #expect(try await app.state(of: "a") == before)
        // Stopping sync gives the lease up at once: no need to wait for it to run out.
        await app.queue.stopSync()

        let repaired = try await tool.run([
            "verify", db, "--dir", app.folder.path("attachments"), "--remote", remoteFolder.path("remote"), "--repair",
        ])
        #expect(repaired.status == 0, "\(repaired.standardOutput) \(repaired.standardError)")
        #expect(app.bytesOnDisk("a.bin") == testBytes(900), "startup queued it again and the pass fetched it")
    }

    @Test("a missing directory or database exits 1 and says which")
    func unreadable() async throws {
        let device = try QueueHarness()
        _ = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "bin")
        await device.queue.close()
        let tool = try CommandLineTool.locate()
        let noDir = try await tool.run([
            "verify", device.folder.path("app.sqlite"), "--dir", device.folder.path("nope"),
        ])
        #expect(noDir.status == 1)
        #expect(noDir.standardError.contains("no attachments directory"))
        let noDB = try await tool.run([
            "verify", device.folder.path("none.sqlite"), "--dir", device.folder.path("attachments"),
        ])
        #expect(noDB.status == 1)
        #expect(noDB.standardError.contains("no database file"))
    }
}
