import AttachmentSync
import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

/// `attachment-sync gc`, run as a user runs it, on a folder remote that two real queues filled.
@Suite("attachment-sync gc", .cleansUp)
struct GCCommandTests {
    @Test("unreferenced files older than the grace period are listed, and deleted only with --apply")
    func collectsOnlyOldUnreferencedFiles() async throws {
        let remote = try FolderRemote()
        let remotePath = remote.path
        let phone = try await remote.device(uploading: [("phone", testBytes(3_000))], fileExtension: "jpg")
        let tablet = try await remote.device(uploading: [("tablet", testBytes(2_000))], fileExtension: "jpg")
        await phone.queue.close()
        await tablet.queue.close()
        // Left behind by a device that no longer exists, ten days ago; and one uploaded a moment ago by a
        // device whose row has not arrived.
        let tenDaysAgo = Date().addingTimeInterval(-10 * 86_400)
        let leftBehind = Attachment(
            id: "x", filename: "Old Photo.JPG", state: .synced, contentHash: FileStreaming.sha256(testBytes(4_096)))
        try await remote.upload(testBytes(4_096), as: leftBehind, writtenAt: tenDaysAgo)
        try remote.place(testBytes(100), named: "fresh.jpg")
        // An upload that crashed before its copy was linked, ten days ago.
        let interrupted = ".attachment-sync-tmp-5eed5eed-0E984725-C51C-4BF4-9960-E1C80E27ABA0"
        try remote.place(testBytes(2_048), named: interrupted, writtenAt: tenDaysAgo)
        let tool = try CommandLineTool.locate()
        let phoneDB = phone.folder.path("app.sqlite")
        let tabletDB = tablet.folder.path("app.sqlite")

        let dryRun = try await tool.run(["gc", "--remote", remotePath, "--db", phoneDB, "--db", tabletDB])
        #expect(dryRun.status == 0, "stderr: \(dryRun.standardError)")
        #expect(dryRun.standardOutput.contains("listed 4 files"), "\(dryRun.standardOutput)")
        #expect(dryRun.standardOutput.contains("2 referenced, 1 unreferenced, 1 foreign"))
        #expect(dryRun.standardOutput.contains("would delete 1 file (4.0 KiB)"))
        #expect(dryRun.standardOutput.contains("^old%20^photo.^j^p^g"))
        #expect(dryRun.standardOutput.contains("fresh.jpg  100 B, written"))
        #expect(dryRun.standardOutput.contains("would delete 1 file (2.0 KiB) the remote kept for itself"))
        #expect(dryRun.standardOutput.contains(interrupted))
        #expect(dryRun.standardOutput.contains("run again with --apply"))
        #expect(try Self.names(remotePath).filter { !$0.hasPrefix(".") }.count == 4, "a dry run deletes nothing")

        // Only the phone's database: the tablet's photo looks unreferenced but is younger than the grace.
        let onePhone = try await tool.run(["gc", "--remote", remotePath, "--db", phoneDB, "--json"])
        #expect(onePhone.status == 0)
        let document = try #require(
            try JSONSerialization.jsonObject(with: Data(onePhone.standardOutput.utf8)) as? [String: Any])
        #expect(document["applied"] as? Bool == false)
        #expect(document["referencedFiles"] as? Int == 1)
        let candidates = try #require(document["candidates"] as? [[String: Any]])
        #expect(candidates.compactMap { $0["filename"] as? String } == ["Old Photo.JPG"])
        let recent = try #require(document["recent"] as? [[String: Any]])
        #expect(recent.compactMap { $0["name"] as? String } == ["tablet.jpg"])
        let foreign = try #require(document["foreign"] as? [[String: Any]])
        #expect(foreign.compactMap { $0["name"] as? String } == ["fresh.jpg"], "written by no queue: no stored hash")
        let leftovers = try #require(document["leftovers"] as? [[String: Any]])
        #expect(leftovers.compactMap { $0["name"] as? String } == [interrupted.lastPathComponent])
        #expect(document["leftoverBytes"] as? Int == 2_048)

        let applied = try await tool.run(["gc", "--remote", remotePath, "--db", phoneDB, "--db", tabletDB, "--apply"])
        #expect(applied.status == 0, "stderr: \(applied.standardError)")
        #expect(applied.standardOutput.contains("deleted 1 file (4.0 KiB)"))
        let left = try Self.names(remotePath)
        #expect(!left.contains(interrupted.lastPathComponent), "the interrupted upload's copy was collected")
        #expect(left.filter { !$0.hasPrefix(".") } == ["fresh.jpg", "phone.jpg", "tablet.jpg"])
        #expect(!left.contains(".attachment-sync-sha256-^old%20^photo.^j^p^g"), "its stored hash went with it")
        #expect(left.contains(".attachment-sync-sha256-phone.jpg"))

        // With no grace, the tablet's photo goes when only the phone's database is given; referenced files
        // never do, nor does the file no queue wrote.
        let all = try await tool.run(["gc", "--remote", remotePath, "--db", phoneDB, "--apply", "--grace", "0s"])
        #expect(all.status == 0)
        #expect(try Self.names(remotePath).filter { !$0.hasPrefix(".") } == ["fresh.jpg", "phone.jpg"])
    }

    @Test("files the library did not write (no stored SHA-256) are listed as foreign and kept, whatever their age")
    func keepsForeignFiles() async throws {
        let remote = try FolderRemote()
        let remotePath = remote.path
        let phone = try await remote.device(uploading: [("phone", testBytes(3_000))], fileExtension: "jpg")
        await phone.queue.close()
        let month = Date().addingTimeInterval(-30 * 86_400)
        // An attachment a device uploaded and no record names any more: the library's, collectable.
        let orphan = Attachment(id: "orphan", filename: "orphan.jpg", state: .synced)
        try await remote.upload(testBytes(1_024), as: orphan, writtenAt: month)
        // What people and other tools keep in a shared folder, a month old; one named like an attachment.
        let foreign: [String: Data] = [
            ".DS_Store": Data([0, 0, 0, 1, 66, 117, 100, 49]), "important-backup.tar": testBytes(5_000, seed: 3),
            "readme.txt": Data("Photos of the site inspections. Do not delete.\n".utf8),
            "lost-photo.jpg": testBytes(700, seed: 4),
        ]
        for (name, data) in foreign { try remote.place(data, named: name, writtenAt: month) }
        let tool = try CommandLineTool.locate()
        let db = phone.folder.path("app.sqlite")

        let dryRun = try await tool.run(["gc", "--remote", remotePath, "--db", db])
        #expect(dryRun.status == 0, "stderr: \(dryRun.standardError)")
        let output = dryRun.standardOutput
        #expect(output.contains("listed 6 files"), "\(output)")
        #expect(output.contains("1 referenced, 1 unreferenced, 4 foreign"), "\(output)")
        #expect(output.contains("would delete 1 file (1.0 KiB)"), "\(output)")
        let wouldDelete =
            output.components(separatedBy: "would delete").dropFirst().joined()
            .components(separatedBy: "kept").first ?? ""
        #expect(wouldDelete.contains("orphan.jpg"))
        for name in foreign.keys {
            #expect(!wouldDelete.contains(name), "\(name) is not the library's: \(output)")
        }
        let kept = try #require(output.components(separatedBy: "kept 4 files this library did not write").last)
        for name in foreign.keys { #expect(kept.contains("  \(name)  "), "\(name): \(output)") }

        let json = try await tool.run(["gc", "--remote", remotePath, "--db", db, "--json"])
        #expect(json.status == 0)
        let document = try #require(
            try JSONSerialization.jsonObject(with: Data(json.standardOutput.utf8)) as? [String: Any])
        let candidates = try #require(document["candidates"] as? [[String: Any]])
        #expect(candidates.compactMap { $0["name"] as? String } == ["orphan.jpg"])
        let foreignListed = try #require(document["foreign"] as? [[String: Any]])
        #expect(foreignListed.compactMap { $0["name"] as? String } == foreign.keys.sorted())

        let applied = try await tool.run(["gc", "--remote", remotePath, "--db", db, "--apply", "--grace", "0s"])
        #expect(applied.status == 0, "stderr: \(applied.standardError)")
        #expect(applied.standardOutput.contains("deleted 1 file (1.0 KiB)"), "\(applied.standardOutput)")
        for (name, data) in foreign {
            let url = URL(fileURLWithPath: remotePath).appendingPathComponent(name)
            #expect(try Data(contentsOf: url) == data, "\(name) is kept, byte for byte")
        }
        let left = try Self.names(remotePath)
        #expect(!left.contains("orphan.jpg") && !left.contains(".attachment-sync-sha256-orphan.jpg"))
        #expect(left.contains("phone.jpg"))
    }

    @Test(
        "--state: a dry run's state is applied later, minus what a record refers to by then; other settings are refused"
    )
    func stateFileCarriesOver() async throws {
        let remote = try FolderRemote()
        let remotePath = remote.path
        let phone = try await remote.device(uploading: [("phone", testBytes(3_000))], fileExtension: "jpg")
        let tenDaysAgo = Date().addingTimeInterval(-10 * 86_400)
        for name in ["gone-1.jpg", "gone-2.jpg", "claimed.jpg"] {
            try await remote.upload(
                testBytes(1_000), as: Attachment(id: name, filename: name, state: .synced), writtenAt: tenDaysAgo)
        }
        let tool = try CommandLineTool.locate()
        let phoneDB = phone.folder.path("app.sqlite")
        let state = phone.folder.path("gc-state.sqlite")
        let dryRun = try await tool.run(["gc", "--remote", remotePath, "--db", phoneDB, "--state", state])
        #expect(dryRun.status == 0, "stderr: \(dryRun.standardError)")
        #expect(dryRun.standardOutput.contains("would delete 3 files"), "\(dryRun.standardOutput)")
        #expect(dryRun.standardError.contains("attachment-sync gc: listing: 4 files, 3 unreferenced"))
        #expect(FileManager.default.fileExists(atPath: state), "the state file is kept")

        // A record for one of them arrives; a file uploaded after the dry run is not in its listing.
        try await phone.db.writeTransaction { tx in
            try tx.execute(
                sql: "INSERT INTO attachments (id, filename, state, timestamp) VALUES ('claimed', 'claimed.jpg', 3, 0)")
        }
        await phone.queue.close()
        try await remote.upload(
            testBytes(1_000), as: Attachment(id: "late", filename: "late.jpg", state: .synced), writtenAt: tenDaysAgo)

        let otherGrace = try await tool.run(
            ["gc", "--remote", remotePath, "--db", phoneDB, "--state", state, "--grace", "1d", "--apply"])
        #expect(otherGrace.status == 1)
        #expect(otherGrace.standardError.contains("graceSeconds"), "\(otherGrace.standardError)")
        #expect(!otherGrace.standardError.contains("continue from"), "a refused state file is not to be continued")
        #expect(try Self.names(remotePath).contains("gone-1.jpg"), "a refused run deletes nothing")

        let applied = try await tool.run(["gc", "--remote", remotePath, "--db", phoneDB, "--state", state, "--apply"])
        #expect(applied.status == 0, "stderr: \(applied.standardError)")
        #expect(applied.standardOutput.contains("deleted 2 files (2.0 KiB)"), "\(applied.standardOutput)")
        #expect(
            try Self.names(remotePath).filter { !$0.hasPrefix(".") } == ["claimed.jpg", "late.jpg", "phone.jpg"])
    }

    @Test("bad arguments exit 64 naming the problem; an unreadable database exits 1 and deletes nothing")
    func badArguments() async throws {
        let device = try QueueHarness()
        _ = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "bin")
        try await device.queue.syncNow()
        await device.queue.close()
        let tool = try CommandLineTool.locate()
        let db = device.folder.path("app.sqlite")
        let remote = device.folder.path("remote")
        try FileManager.default.createDirectory(atPath: remote, withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: remote).appendingPathComponent("stray.bin"))

        let cases: [([String], String)] = [
            (["gc", "--remote", remote], "at least one --db"),
            (["gc", "--db", db], "--remote is required"),
            (["gc", "--remote", remote, "--db", db, "--grace", "7"], "--grace must be"),
            (["gc", "--remote", remote, "--db", db, "--grace=-1d"], "--grace must be"),
            (["gc", "--remote", "ftp://host/x", "--db", db], "scheme ftp:"),
            (["gc", "--remote", device.folder.path("nowhere"), "--db", db], "is not a folder"),
            (["gc", "--remote", remote, "--endpoint", "http://127.0.0.1:1", "--db", db], "s3:// remote only"),
        ]
        for (arguments, message) in cases {
            let result = try await tool.run(arguments)
            #expect(result.status == 64, "\(arguments)")
            #expect(result.standardError.contains(message), "\(arguments): \(result.standardError)")
        }
        let secret = "sup3r-secret-value"
        let noKey = try await tool.run(
            ["gc", "--remote", "s3://bucket-name/p", "--db", db],
            environment: ["AWS_ACCESS_KEY_ID": nil, "AWS_SECRET_ACCESS_KEY": secret])
        #expect(noKey.status == 64)
        #expect(noKey.standardError.contains("AWS_ACCESS_KEY_ID is not set"))
        #expect(!noKey.standardError.contains(secret))
        let withPassword = try await tool.run(["gc", "--remote", "https://user:\(secret)@example.com/x", "--db", db])
        #expect(withPassword.status == 64)
        #expect(!withPassword.standardError.contains(secret), "a password in the URL is never printed")

        let missing = try await tool.run(
            [
                "gc", "--remote", remote, "--db", db, "--db", device.folder.path("none.sqlite"), "--apply", "--grace",
                "0s",
            ])
        #expect(missing.status == 1)
        #expect(missing.standardError.contains("no database file"))
        #expect(FileManager.default.fileExists(atPath: remote + "/stray.bin"), "nothing deleted on an error")
    }

    static func names(_ folder: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: folder).sorted()
    }
}
