import AttachmentSync
import AttachmentSyncTesting
import Crypto
import Foundation
import TestSupport
import Testing

/// `attachment-sync rotate-keys`, run as an operator runs it, on a folder remote a real queue filled with
/// encrypted files.
@Suite("attachment-sync rotate-keys", .cleansUp)
struct RotateKeysCommandTests {
    static func base64(_ key: SymmetricKey) -> String {
        key.withUnsafeBytes { Data($0).base64EncodedString() }
    }

    @Test(
        "re-encrypts every file under --current-key, then finds nothing to do; a missing old key exits 2 and changes nothing; keys are never printed"
    )
    func rotatesAFolderRemote() async throws {
        let remoteFolder = try FolderRemote()
        let k1 = try #require(EncryptedFormatTests.keys["k1"])
        let k2 = SymmetricKey(data: Data((0..<32).map { UInt8(200 &+ $0) }))
        let device = try QueueHarness(
            remote: EncryptedRemoteStorage(
                wrapping: remoteFolder.storage, keys: StaticKeyProvider(keys: ["k1": k1], current: "k1")))
        let contents = [("a", testBytes(70_000)), ("b", testBytes(10)), ("c", Data())]
        for (id, data) in contents {
            _ = try await device.queue.saveFile(data: data, mediaType: nil, fileExtension: "bin", id: id)
        }
        try await device.queue.syncNow()
        await device.queue.close()
        let db = device.folder.path("app.sqlite")
        let folder = try TemporaryDirectory()
        let tool = try CommandLineTool.locate()
        func keysFile(_ keys: [String: SymmetricKey]) throws -> String {
            let path = folder.path("keys-\(keys.keys.sorted().joined()).json")
            try JSONEncoder().encode(keys.mapValues(Self.base64)).write(to: URL(fileURLWithPath: path))
            return path
        }
        func stored(_ id: String) throws -> Data? {
            FileManager.default.contents(atPath: try remoteFolder.file(ofId: id))
        }
        func keyId(_ id: String) throws -> String? {
            let object = try #require(try stored(id))
            return String(decoding: object[9..<11], as: UTF8.self)
        }
        let secrets = [Self.base64(k1), Self.base64(k2)]

        // Without the old key: nothing can be read, everything stays, exit 2.
        let before = try contents.map { try stored($0.0) }
        let blind = try await tool.run(
            [
                "rotate-keys", db, "--remote", remoteFolder.path, "--keys", try keysFile(["k2": k2]), "--current-key",
                "k2",
            ])
        #expect(blind.status == 2, "stderr: \(blind.standardError)")
        #expect(blind.standardOutput.contains("3 left as they were"))
        #expect(blind.standardOutput.contains("\"k1\""), "names the missing key id")
        #expect(try contents.map { try stored($0.0) } == before)

        let both = try keysFile(["k1": k1, "k2": k2])
        let journal = folder.path("journal.log")
        let run = try await tool.run(
            [
                "rotate-keys", db, "--remote", remoteFolder.path, "--keys", both, "--current-key", "k2", "--journal",
                journal,
            ])
        #expect(run.status == 0, "stderr: \(run.standardError)")
        #expect(run.standardOutput.contains("3 re-encrypted under \"k2\""), "\(run.standardOutput)")
        for (id, _) in contents { #expect(try keyId(id) == "k2") }

        let json = try await tool.run(
            ["rotate-keys", db, "--remote", remoteFolder.path, "--keys", both, "--current-key", "k2", "--json"])
        #expect(json.status == 0)
        let document = try #require(
            try JSONSerialization.jsonObject(with: Data(json.standardOutput.utf8)) as? [String: Any])
        #expect(document["upToDate"] as? Int == 3)
        #expect((document["rotated"] as? [String])?.isEmpty == true)
        #expect(document["complete"] as? Bool == true)

        // A device with only the new key reads every file.
        let reader = try QueueHarness(
            remote: EncryptedRemoteStorage(
                wrapping: remoteFolder.storage, keys: StaticKeyProvider(keys: ["k2": k2], current: "k2")))
        for (id, data) in contents {
            let bytes = try await reader.remote.downloadFile(
                attachment: Attachment(id: id, filename: "\(id).bin", state: .queuedDownload))
            #expect(bytes == data, "\(id)")
        }
        await reader.queue.close()

        for output in [blind, run, json] {
            for secret in secrets {
                #expect(!output.standardOutput.contains(secret) && !output.standardError.contains(secret))
            }
        }
    }

    @Test("a bad keys file, a current key not in it, or a remote that cannot replace files: exit 1, nothing changed")
    func refusesBadInput() async throws {
        let remoteFolder = try FolderRemote()
        let device = try await remoteFolder.device(uploading: [("a", testBytes(100))])
        await device.queue.close()
        let db = device.folder.path("app.sqlite")
        let folder = try TemporaryDirectory()
        let tool = try CommandLineTool.locate()
        let notJSON = folder.path("bad.json")
        try Data("k1=abc".utf8).write(to: URL(fileURLWithPath: notJSON))
        let shortKey = folder.path("short.json")
        try Data(#"{"k1": "c2hvcnQ="}"#.utf8).write(to: URL(fileURLWithPath: shortKey))
        let good = folder.path("good.json")
        try Data(#"{"k1": "\#(Self.base64(SymmetricKey(size: .bits256)))"}"#.utf8).write(to: URL(fileURLWithPath: good))

        for (keys, current, says) in [
            (notJSON, "k1", "is not a JSON object"), (shortKey, "k1", "\"k1\""), (good, "k9", "\"k9\""),
            (folder.path("missing.json"), "k1", "cannot read the keys file"),
        ] {
            let result = try await tool.run(
                ["rotate-keys", db, "--remote", remoteFolder.path, "--keys", keys, "--current-key", current])
            #expect(result.status == 1, "\(keys): \(result.standardError)")
            #expect(result.standardError.contains(says), "\(result.standardError)")
        }
        let http = try await tool.run(
            ["rotate-keys", db, "--remote", "http://127.0.0.1:9/attachments/", "--keys", good, "--current-key", "k1"])
        #expect(http.status == 1)
        #expect(http.standardError.contains("cannot replace"), "\(http.standardError)")
        #expect(
            FileManager.default.contents(atPath: try remoteFolder.file(ofId: "a")) == testBytes(100),
            "the plain file is untouched")
    }
}
