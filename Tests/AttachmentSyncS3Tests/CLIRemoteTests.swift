import AttachmentSync
import Foundation
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// `attachment-sync gc` and `verify --remote`, run as a user runs them, against the real Ceph S3 gateway
/// (`s3://bucket/prefix --endpoint`) and the real nginx WebDAV server (`http://…`).
@Suite("attachment-sync gc and verify on S3 and WebDAV")
struct CLIRemoteTests {
    /// Saves `contents` through a real queue over `remote` in `folder` and uploads them, then closes it.
    static func device(
        in folder: URL, remote: any RemoteStorageAdapter, saving contents: [String: Data]
    ) async throws -> (db: String, attachments: String) {
        let dbPath = folder.appendingPathComponent("app.sqlite").path
        let attachments = folder.appendingPathComponent("attachments").path
        let db = try LocalDatabase(path: dbPath, schema: Schema(tables: [createAttachmentTable()]))
        var configuration = AttachmentQueue.Configuration(attachmentsDirectory: attachments)
        configuration.syncInterval = .zero
        try await withAttachmentQueue(db: db, remoteStorage: remote, configuration: configuration) { queue in
            for (id, data) in contents.sorted(by: { $0.key < $1.key }) {
                _ = try await queue.saveFile(data: data, mediaType: nil, fileExtension: "bin", id: id)
            }
            try await queue.syncNow()
        }
        try await db.close()
        return (dbPath, attachments)
    }

    @Test("a mistyped bucket or prefix: verify and gc say so and exit 1, --repair changes no record")
    func mistypedLocation() async throws {
        let underPrefix: (inout S3RemoteStorage.Configuration) -> Void = { $0.keyPrefix = "app/" }
        try await S3TestBucket.with("typo", configure: underPrefix) { storage, bucket in
            try await withTemporaryDirectory { folder in
                let phone = try await Self.device(
                    in: folder.appendingPathComponent("phone"), remote: storage,
                    saving: ["a": testBytes(count: 1_000), "b": testBytes(count: 2_000, seed: 2)])
                let tool = try CommandLineTool.locate()
                let server = TestServers.s3
                let environment: [String: String?] = [
                    "AWS_ACCESS_KEY_ID": server.accessKey, "AWS_SECRET_ACCESS_KEY": server.secretKey,
                    "AWS_SESSION_TOKEN": nil, "AWS_REGION": server.region,
                ]
                let states = { () async throws -> [String] in
                    let db = try LocalDatabase.readOnly(path: phone.db)
                    defer { Task { try? await db.close() } }
                    return try await db.getAll(
                        sql: "SELECT id || ':' || state || ':' || has_synced AS s FROM attachments ORDER BY id"
                    ) {
                        try $0.getString(name: "s")
                    }
                }
                let before = try await states()
                for location in ["s3://\(bucket.name)-typo/app", "s3://\(bucket.name)/apq"] {
                    let remote = ["--remote", location, "--endpoint", server.endpoint.absoluteString]
                    let verified = try await tool.run(
                        ["verify", phone.db, "--dir", phone.attachments] + remote, environment: environment)
                    #expect(verified.status == 1, "\(location): \(verified.standardOutput) \(verified.standardError)")
                    #expect(!verified.standardOutput.contains("missing"), "no file is called missing")
                    let repaired = try await tool.run(
                        ["verify", phone.db, "--dir", phone.attachments, "--repair"] + remote, environment: environment)
                    #expect(repaired.status == 1, "\(location): \(repaired.standardOutput) \(repaired.standardError)")
                    #expect(!repaired.standardOutput.contains("repaired: uploaded"))
                    #expect(try await states() == before, "\(location): no record changed")
                    let collected = try await tool.run(["gc", "--db", phone.db] + remote, environment: environment)
                    #expect(
                        collected.status == 1, "\(location): \(collected.standardOutput) \(collected.standardError)")
                    #expect(!collected.standardOutput.contains("listed 0 files"))
                }
            }
        }
    }

    @Test("s3://bucket/prefix: gc deletes only the old unreferenced object; verify --repair restores a lost one")
    func onCeph() async throws {
        let underPrefix: (inout S3RemoteStorage.Configuration) -> Void = { $0.keyPrefix = "app/" }
        try await S3TestBucket.with("cli", configure: underPrefix) { storage, bucket in
            try await withTemporaryDirectory { folder in
                let contents = ["a": testBytes(count: 3_000), "b": testBytes(count: 2_000, seed: 2)]
                let phone = try await Self.device(
                    in: folder.appendingPathComponent("phone"), remote: storage, saving: contents)
                try await storage.uploadFile(data: Data("stray".utf8), attachment: attachment("stray.bin"))
                try await bucket.withStorage({ $0.keyPrefix = "app/deeper/" }) { deeper in
                    try await deeper.uploadFile(data: Data("not ours".utf8), attachment: attachment("x.bin"))
                }
                let tool = try CommandLineTool.locate()
                let server = TestServers.s3
                let environment: [String: String?] = [
                    "AWS_ACCESS_KEY_ID": server.accessKey, "AWS_SECRET_ACCESS_KEY": server.secretKey,
                    "AWS_SESSION_TOKEN": nil, "AWS_REGION": server.region,
                ]
                let location = ["--remote", "s3://\(bucket.name)/app", "--endpoint", server.endpoint.absoluteString]

                let dryRun = try await tool.run(["gc", "--db", phone.db] + location, environment: environment)
                #expect(dryRun.status == 0, "stderr: \(dryRun.standardError)")
                #expect(dryRun.standardOutput.contains("listed 3 files in s3://\(bucket.name)/app/"))
                #expect(dryRun.standardOutput.contains("2 referenced, 1 unreferenced"))
                #expect(dryRun.standardOutput.contains("nothing to delete"), "younger than 7d")
                #expect(!dryRun.standardOutput.contains(server.secretKey))

                let applied = try await tool.run(
                    ["gc", "--db", phone.db, "--grace", "0s", "--apply"] + location, environment: environment)
                #expect(applied.status == 0, "stderr: \(applied.standardError)")
                #expect(applied.standardOutput.contains("deleted 1 file (5 B)"))
                #expect(try await storage.listKeys().sorted() == ["app/a.bin", "app/b.bin", "app/deeper/x.bin"])

                let clean = try await tool.run(
                    ["verify", phone.db, "--dir", phone.attachments] + location, environment: environment)
                #expect(clean.status == 0, "\(clean.standardOutput) \(clean.standardError)")
                #expect(clean.standardOutput.contains("checked 2 remote files: all agree with their records"))

                try await storage.deleteFile(attachment: attachment("b.bin"))
                let lost = try await tool.run(
                    ["verify", phone.db, "--dir", phone.attachments] + location, environment: environment)
                #expect(lost.status == 2)
                #expect(lost.standardOutput.contains("remote b.bin: missing from remote storage"))
                let repaired = try await tool.run(
                    ["verify", phone.db, "--dir", phone.attachments, "--repair"] + location, environment: environment)
                #expect(repaired.status == 0, "\(repaired.standardOutput) \(repaired.standardError)")
                #expect(try await storage.downloadFile(attachment: attachment("b.bin")) == contents["b"])
            }
        }
    }

    @Test("an http(s) WebDAV folder: gc lists with PROPFIND and deletes a file with its stored hash")
    func onWebDAV() async throws {
        try await TestServers.requireReachable(TestServers.webdav, startCommand: "scripts/webdav-server start")
        let base = TestServers.webdav.appendingPathComponent("auth/cli-\(UUID().uuidString.lowercased())")
        let token = TestServers.webdavToken
        let remote = try HTTPRemoteStorage(
            configuration: .init(baseURL: base, headers: { [("Authorization", "Bearer \(token)")] }))
        do {
            try await withTemporaryDirectory { folder in
                let phone = try await Self.device(
                    in: folder, remote: remote, saving: ["kept": testBytes(count: 1_000)])
                try await remote.uploadFile(
                    data: Data("left behind".utf8),
                    attachment: AttachmentSync.Attachment(
                        id: "s", filename: "Left Behind.bin", state: .synced,
                        contentHash: FileStreaming.sha256(Data("left behind".utf8))))
                let tool = try CommandLineTool.locate()
                let arguments = ["gc", "--remote", base.absoluteString, "--db", phone.db]

                let refused = try await tool.run(arguments, environment: ["ATTACHMENT_SYNC_HTTP_TOKEN": nil])
                #expect(refused.status == 1, "no token: 401")
                #expect(!refused.standardError.isEmpty)

                let environment: [String: String?] = ["ATTACHMENT_SYNC_HTTP_TOKEN": token]
                let dryRun = try await tool.run(arguments, environment: environment)
                #expect(dryRun.status == 0, "stderr: \(dryRun.standardError)")
                #expect(dryRun.standardOutput.contains("listed 2 files"), "\(dryRun.standardOutput)")
                #expect(dryRun.standardOutput.contains("1 referenced, 1 unreferenced"))
                #expect(!dryRun.standardOutput.contains(token) && !dryRun.standardError.contains(token))

                let applied = try await tool.run(arguments + ["--grace", "0s", "--apply"], environment: environment)
                #expect(applied.status == 0, "stderr: \(applied.standardError)")
                #expect(applied.standardOutput.contains("Left Behind.bin"))
                let listed = try await remote.allFiles().map(\.storedName)
                #expect(listed == ["kept.bin"])
                let gone = AttachmentSync.Attachment(id: "s", filename: "Left Behind.bin", state: .synced)
                #expect(try await remote.fileInfo(attachment: gone) == nil)
                // Its stored hash went with it: nothing is left under the companion's name either.
                let companion = AttachmentSync.Attachment(
                    id: "c", filename: HTTPRemoteStorage.contentHashPrefix + "Left Behind.bin", state: .synced)
                await #expect(throws: AttachmentError.self) { _ = try await remote.downloadFile(attachment: companion) }

                let verified = try await tool.run(
                    ["verify", phone.db, "--dir", phone.attachments, "--remote", base.absoluteString],
                    environment: environment)
                #expect(verified.status == 0, "\(verified.standardOutput) \(verified.standardError)")
                #expect(verified.standardOutput.contains("checked 1 remote file: all agree"))
                try await remote.deleteFile(
                    attachment: AttachmentSync.Attachment(id: "k", filename: "kept.bin", state: .synced))
            }
            try await remote.shutdown()
        } catch {
            try? await remote.shutdown()
            throw error
        }
    }

    /// What people and other tools keep beside the attachments in a shared bucket or folder.
    static let foreignFiles: [String: Data] = [
        ".DS_Store": Data([0, 0, 0, 1, 66, 117, 100, 49]), "important-backup.tar": testBytes(count: 5_000, seed: 3),
        "readme.txt": Data("Photos of the site inspections. Do not delete.\n".utf8),
    ]

    @Test("s3://: gc keeps objects without the library's x-amz-meta-sha256 (listed as foreign), deletes its own")
    func foreignObjectsOnCeph() async throws {
        let underPrefix: (inout S3RemoteStorage.Configuration) -> Void = { $0.keyPrefix = "app/" }
        try await S3TestBucket.with("cli-foreign", configure: underPrefix) { storage, bucket in
            try await withTemporaryDirectory { folder in
                let phone = try await Self.device(
                    in: folder.appendingPathComponent("phone"), remote: storage,
                    saving: ["a": testBytes(count: 3_000)])
                try await storage.uploadFile(data: Data("orphan".utf8), attachment: attachment("orphan.bin"))
                // Put by another tool: a plain PutObject, no SHA-256 stored with the object.
                for (name, data) in Self.foreignFiles {
                    let put = S3Request(
                        method: .put, key: "app/" + name, body: .data(data), payload: .hashing(data),
                        operation: "PutObject")
                    _ = try await storage.send(put, attachmentId: nil)
                }
                let tool = try CommandLineTool.locate()
                let server = TestServers.s3
                let environment: [String: String?] = [
                    "AWS_ACCESS_KEY_ID": server.accessKey, "AWS_SECRET_ACCESS_KEY": server.secretKey,
                    "AWS_SESSION_TOKEN": nil, "AWS_REGION": server.region,
                ]
                let arguments = [
                    "gc", "--db", phone.db, "--remote", "s3://\(bucket.name)/app", "--endpoint",
                    server.endpoint.absoluteString,
                ]

                let dryRun = try await tool.run(arguments + ["--grace", "0s"], environment: environment)
                #expect(dryRun.status == 0, "stderr: \(dryRun.standardError)")
                #expect(
                    dryRun.standardOutput.contains("1 referenced, 1 unreferenced, 3 foreign"),
                    "\(dryRun.standardOutput)")
                #expect(dryRun.standardOutput.contains("would delete 1 file (6 B)"), "\(dryRun.standardOutput)")

                let applied = try await tool.run(
                    arguments + ["--grace", "0s", "--apply", "--json"], environment: environment)
                #expect(applied.status == 0, "stderr: \(applied.standardError)")
                let document = try #require(
                    try JSONSerialization.jsonObject(with: Data(applied.standardOutput.utf8)) as? [String: Any])
                let foreign = try #require(document["foreign"] as? [[String: Any]])
                #expect(foreign.compactMap { $0["name"] as? String } == Self.foreignFiles.keys.sorted())
                #expect(
                    try await storage.listKeys().sorted()
                        == ["app/.DS_Store", "app/a.bin", "app/important-backup.tar", "app/readme.txt"])
                for (name, data) in Self.foreignFiles {
                    #expect(try await storage.downloadFile(attachment: attachment(name)) == data, "\(name)")
                }
            }
        }
    }

    @Test("WebDAV: gc keeps files without the library's stored SHA-256 (listed as foreign), deletes its own")
    func foreignFilesOnWebDAV() async throws {
        try await TestServers.requireReachable(TestServers.webdav, startCommand: "scripts/webdav-server start")
        let base = TestServers.webdav.appendingPathComponent("auth/cli-foreign-\(UUID().uuidString.lowercased())")
        let token = TestServers.webdavToken
        let headers: HTTPRemoteStorage.HeadersProvider = { [("Authorization", "Bearer \(token)")] }
        let remote = try HTTPRemoteStorage(configuration: .init(baseURL: base, headers: headers))
        // Another tool: plain PUTs, no stored hash beside the file.
        var plain = HTTPRemoteStorage.Configuration(baseURL: base, headers: headers)
        plain.storesContentHashes = false
        plain.createOnly = false
        let other = try HTTPRemoteStorage(configuration: plain)
        do {
            try await withTemporaryDirectory { folder in
                let phone = try await Self.device(in: folder, remote: remote, saving: ["kept": testBytes(count: 1_000)])
                try await remote.uploadFile(data: Data("orphan".utf8), attachment: attachment("orphan.bin"))
                // nginx's PROPFIND lists no dot files: .DS_Store is never seen, so never at risk.
                for (name, data) in Self.foreignFiles where !name.hasPrefix(".") {
                    try await other.uploadFile(data: data, attachment: attachment(name))
                }
                let tool = try CommandLineTool.locate()
                let environment: [String: String?] = ["ATTACHMENT_SYNC_HTTP_TOKEN": token]
                let arguments = ["gc", "--remote", base.absoluteString, "--db", phone.db, "--grace", "0s"]

                let dryRun = try await tool.run(arguments, environment: environment)
                #expect(dryRun.status == 0, "stderr: \(dryRun.standardError)")
                #expect(
                    dryRun.standardOutput.contains("1 referenced, 1 unreferenced, 2 foreign"),
                    "\(dryRun.standardOutput)")

                let applied = try await tool.run(arguments + ["--apply"], environment: environment)
                #expect(applied.status == 0, "stderr: \(applied.standardError)")
                #expect(applied.standardOutput.contains("deleted 1 file (6 B)"), "\(applied.standardOutput)")
                #expect(
                    try await remote.allFiles().map(\.storedName) == ["important-backup.tar", "kept.bin", "readme.txt"])
                for (name, data) in Self.foreignFiles where !name.hasPrefix(".") {
                    #expect(try await other.downloadFile(attachment: attachment(name)) == data, "\(name)")
                    try await other.deleteFile(attachment: attachment(name))
                }
                try await remote.deleteFile(attachment: attachment("kept.bin"))
            }
            try await remote.shutdown()
            try await other.shutdown()
        } catch {
            try? await remote.shutdown()
            try? await other.shutdown()
            throw error
        }
    }
}
