import AttachmentSync
import Foundation
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `attachment-sync demo --s3 URL`, run as a user runs it, against the real Ceph S3 gateway on 127.0.0.1
/// (`scripts/s3-server start`).
@Suite("attachment-sync demo --s3")
struct DemoS3CommandTests {
    /// The environment the demo reads its credentials and region from, for the test server.
    static var credentials: [String: String?] {
        let server = TestServers.s3
        return [
            "AWS_ACCESS_KEY_ID": server.accessKey, "AWS_SECRET_ACCESS_KEY": server.secretKey,
            "AWS_SESSION_TOKEN": nil, "AWS_REGION": server.region,
        ]
    }

    /// The demo's URL for `bucket`, with `path` after it.
    static func url(bucket: String, path: String = "") -> String {
        var endpoint = TestServers.s3.endpoint.absoluteString
        while endpoint.hasSuffix("/") { endpoint.removeLast() }
        return "\(endpoint)/\(bucket)\(path)"
    }

    /// Runs `body` with a bucket name nobody uses yet, then deletes the bucket if the demo made it.
    static func withNewBucket(_ label: String, _ body: (S3TestBucket) async throws -> Void) async throws {
        try await TestServers.requireReachable(TestServers.s3.endpoint, startCommand: "scripts/s3-server start")
        try await withTemporaryDirectory { directory in
            let bucket = S3TestBucket(name: TestServers.uniqueBucketName(label), stateDirectory: directory)
            var failure: (any Error)?
            do {
                try await body(bucket)
            } catch {
                failure = error
            }
            let storage = try bucket.makeStorage()
            let bucketExists = (try? await storage.listKeys()) != nil
            try await storage.shutdown()
            if bucketExists { try await bucket.destroy() }
            if let failure { throw failure }
        }
    }

    /// The rows of the final table, split into their cells.
    static func tableRows(_ output: String) -> [[Substring]] {
        output.split(separator: "\n").map { $0.split(separator: " ") }
    }

    @Test("creates the bucket, converges with five photos and leaves no object behind")
    func demoConvergesOnS3() async throws {
        try await Self.withNewBucket("demo") { bucket in
            // Given the built tool and a bucket that does not exist yet
            let tool = try CommandLineTool.locate()

            // When the demo runs against it with five photos
            let result = try await tool.run(
                ["demo", "--s3", Self.url(bucket: bucket.name), "--count", "5", "--timeout", "60"],
                environment: Self.credentials)

            // Then it converged, with the same end state as over a folder, and removed its objects
            #expect(result.status == 0, "stdout: \(result.standardOutput)\nstderr: \(result.standardError)")
            #expect(result.standardOutput.contains("share one S3 bucket"))
            #expect(result.standardOutput.contains("demo converged"))
            #expect(result.standardOutput.contains("5/5 photos identical on A, remote and B"))
            let rows = Self.tableRows(result.standardOutput)
            #expect(rows.contains { $0.starts(with: ["A", "0", "0", "0", "4", "0", "4"]) })
            #expect(rows.contains { $0.starts(with: ["B", "0", "0", "0", "4", "1", "5"]) })
            #expect(rows.contains { $0.starts(with: ["remote", "-", "-", "-", "-", "-", "4"]) })
            #expect(
                result.standardOutput.contains("removed the demo's objects under s3://\(bucket.name)/"),
                "\(result.standardOutput)")
            for text in [result.standardOutput, result.standardError] {
                #expect(!text.contains(bucket.server.secretKey))
            }
            let storage = try bucket.makeStorage()
            let keys = try await storage.listKeys()
            try await storage.shutdown()
            #expect(keys.isEmpty, "left behind: \(keys)")
        }
    }

    @Test("with --presigned the devices go through the in-process backend's URLs, converge and leave nothing behind")
    func demoConvergesThroughPresignedURLs() async throws {
        try await Self.withNewBucket("demo-presigned") { bucket in
            // Given the built tool and a bucket that does not exist yet
            let tool = try CommandLineTool.locate()

            // When the demo runs with --presigned and four photos
            let result = try await tool.run(
                ["demo", "--s3", Self.url(bucket: bucket.name), "--presigned", "--count", "4", "--timeout", "60"],
                environment: Self.credentials)

            // Then it converged the same way, every request authorised by the backend, and no URL was shown
            #expect(result.status == 0, "stdout: \(result.standardOutput)\nstderr: \(result.standardError)")
            #expect(result.standardOutput.contains("through presigned URLs (the devices hold no credentials"))
            #expect(result.standardOutput.contains("demo converged"))
            #expect(result.standardOutput.contains("4/4 photos identical on A, remote and B"))
            let rows = Self.tableRows(result.standardOutput)
            #expect(rows.contains { $0.starts(with: ["A", "0", "0", "0", "3", "0", "3"]) })
            #expect(rows.contains { $0.starts(with: ["B", "0", "0", "0", "3", "1", "4"]) })
            let authorised = result.standardOutput.split(separator: "\n")
                .first { $0.hasPrefix("the backend authorised ") }?.split(separator: " ").dropFirst(3).first
                .flatMap { Int($0) }
            #expect((authorised ?? 0) >= 4 + 4 + 1, "at least an upload and a download per photo and a delete")
            for text in [result.standardOutput, result.standardError] {
                #expect(!text.contains(bucket.server.secretKey))
                #expect(!text.contains("X-Amz-Signature"))
            }
            let storage = try bucket.makeStorage()
            let keys = try await storage.listKeys()
            try await storage.shutdown()
            #expect(keys.isEmpty, "left behind: \(keys)")
        }
    }

    @Test("with --on-demand and --keep, under the URL's key prefix, the remaining photos stay in the bucket")
    func demoOnDemandKeepsObjectsUnderPrefix() async throws {
        try await Self.withNewBucket("demo-keep") { bucket in
            // Given the built tool and a URL with a key prefix after the bucket
            let tool = try CommandLineTool.locate()
            let url = Self.url(bucket: bucket.name, path: "/team-a/photos")

            // When the on-demand demo runs with four photos and --keep
            let result = try await tool.run(
                ["demo", "--s3", url, "--on-demand", "--keep", "--count", "4", "--timeout", "60"],
                environment: Self.credentials)
            let keptFolder = result.standardOutput.split(separator: "\n")
                .first { $0.hasPrefix("kept /") }.map { String($0.dropFirst("kept ".count)) }
            if let keptFolder { try? FileManager.default.removeItem(atPath: keptFolder) }

            // Then B fetched three photos and purged one while its remote copy stayed, and the three photos
            // A kept are in the bucket under the URL's prefix and this run's own prefix
            #expect(result.status == 0, "stdout: \(result.standardOutput)\nstderr: \(result.standardError)")
            #expect(result.standardOutput.contains("demo converged"))
            #expect(result.standardOutput.contains("4/4 records, remote-only"))
            #expect(result.standardOutput.contains("its record stays, the remote copy too"))
            let rows = Self.tableRows(result.standardOutput)
            #expect(rows.contains { $0.starts(with: ["A", "0", "0", "0", "3", "0", "3"]) })
            #expect(rows.contains { $0.starts(with: ["B", "0", "0", "0", "3", "1", "2"]) })
            #expect(rows.contains { $0.starts(with: ["remote", "-", "-", "-", "-", "-", "3"]) })
            let location = "s3://\(bucket.name)/team-a/photos/attachment-sync-demo-"
            #expect(result.standardOutput.contains("kept the objects under \(location)"), "\(result.standardOutput)")
            #expect(keptFolder != nil)

            let storage = try bucket.makeStorage()
            let keys = try await storage.listKeys()
            try await storage.shutdown()
            #expect(keys.count == 3, "\(keys)")
            #expect(keys.allSatisfy { $0.hasPrefix("team-a/photos/attachment-sync-demo-") && $0.hasSuffix(".jpg") })
            #expect(Set(keys.map { $0.split(separator: "/").dropLast() }).count == 1, "one prefix per run")
        }
    }

    @Test("a malformed --s3 URL or missing credentials are refused with a message naming the problem")
    func demoRejectsBadURLsAndMissingCredentials() async throws {
        // Given the built tool
        let tool = try CommandLineTool.locate()
        let cases: [(arguments: [String], environment: [String: String?], message: String)] = [
            (["--s3", "not-a-url"], Self.credentials, "--s3 must be an http or https URL like "),
            (["--s3", "ftp://127.0.0.1/bucket"], Self.credentials, "--s3 must be an http or https URL like "),
            (["--s3", "http://127.0.0.1:7480"], Self.credentials, "--s3 names no bucket"),
            (["--s3", "http://127.0.0.1:7480/Bad_Bucket"], Self.credentials, "is not valid"),
            (["--s3", "http://127.0.0.1:7480/bucket?x=1"], Self.credentials, "must not have a query"),
            (["--s3", "http://key:secret@127.0.0.1:7480/bucket"], Self.credentials, "without credentials in it"),
            (
                ["--s3", "http://127.0.0.1:7480/bucket"], ["AWS_ACCESS_KEY_ID": nil, "AWS_SECRET_ACCESS_KEY": nil],
                "AWS_ACCESS_KEY_ID is not set"
            ),
            (
                ["--s3", "http://127.0.0.1:7480/bucket"], ["AWS_ACCESS_KEY_ID": "key", "AWS_SECRET_ACCESS_KEY": ""],
                "AWS_SECRET_ACCESS_KEY is not set"
            ),
            (["--presigned"], Self.credentials, "--presigned needs --s3"),
        ]
        for (arguments, environment, message) in cases {
            // When the demo is started with it
            let result = try await tool.run(["demo"] + arguments, environment: environment, seconds: 30)

            // Then it refuses before doing anything, saying why
            #expect(result.status != 0, "\(arguments)")
            #expect(result.standardError.contains(message), "\(arguments): \(result.standardError)")
            #expect(!result.standardError.contains("secret@"), "the URL's password is not echoed")
            #expect(!result.standardOutput.contains("AttachmentSync demo"), "\(arguments)")
        }
    }

    @Test("a server that cannot be reached stops the demo with a message naming the bucket and server")
    func demoReportsUnreachableServer() async throws {
        // Given the built tool and a port nothing listens on
        let tool = try CommandLineTool.locate()

        // When the demo runs against it
        let result = try await tool.run(
            ["demo", "--s3", "http://127.0.0.1:9/no-such-server", "--count", "2", "--timeout", "20"],
            environment: Self.credentials, seconds: 60)

        // Then it fails, saying what it could not reach
        #expect(result.status != 0)
        #expect(
            result.standardError.contains("could not create or open bucket \"no-such-server\" at http://127.0.0.1:9"),
            "stderr: \(result.standardError)")
        #expect(!result.standardOutput.contains("demo converged"))
    }

    /// The `--remote` and `--endpoint` arguments a demo line names: `… s3://bucket/prefix/ --endpoint URL`.
    static func remoteArguments(in line: Substring) -> [String]? {
        let words = line.split(separator: " ").map(String.init)
        guard let remote = words.firstIndex(where: { $0.hasPrefix("s3://") }), remote + 2 < words.count,
            words[remote + 1] == "--endpoint"
        else { return nil }
        return ["--remote", words[remote], "--endpoint", words[remote + 2]]
    }

    @Test("the demo names its S3 remote the way verify and gc take it, and they accept it as printed")
    func printedRemoteWorksWithVerifyAndGC() async throws {
        try await Self.withNewBucket("demo-printed") { bucket in
            let tool = try CommandLineTool.locate()
            let result = try await tool.run(
                ["demo", "--s3", Self.url(bucket: bucket.name), "--keep", "--count", "3", "--timeout", "60"],
                environment: Self.credentials)
            let keptFolder = result.standardOutput.split(separator: "\n")
                .first { $0.hasPrefix("kept /") }.map { String($0.dropFirst("kept ".count)) }
            defer { if let keptFolder { try? FileManager.default.removeItem(atPath: keptFolder) } }
            #expect(result.status == 0, "stdout: \(result.standardOutput)\nstderr: \(result.standardError)")
            let remoteLine = try #require(
                result.standardOutput.split(separator: "\n").first { $0.hasPrefix("  remote ") },
                "\(result.standardOutput)")
            let remote = try #require(Self.remoteArguments(in: remoteLine), "\(remoteLine)")
            #expect(remote[1].hasPrefix("s3://\(bucket.name)/attachment-sync-demo-"))
            #expect(remote[3] == String(Self.url(bucket: "").dropLast()), "\(remoteLine)")
            let keptLine = try #require(
                result.standardOutput.split(separator: "\n").first { $0.hasPrefix("kept the objects under ") })
            #expect(Self.remoteArguments(in: keptLine) == remote, "\(keptLine)")
            let folder = try #require(keptFolder)

            let gc = try await tool.run(
                ["gc", "--db", folder + "/device-A/app.sqlite", "--db", folder + "/device-B/app.sqlite"] + remote,
                environment: Self.credentials)
            #expect(gc.status == 0, "stderr: \(gc.standardError)")
            #expect(gc.standardOutput.contains("listed 2 files in \(remote[1])"), "\(gc.standardOutput)")
            #expect(gc.standardOutput.contains("2 referenced, 0 unreferenced"), "\(gc.standardOutput)")
            let verify = try await tool.run(
                ["verify", folder + "/device-A/app.sqlite", "--dir", folder + "/device-A/attachments"] + remote,
                environment: Self.credentials)
            #expect(verify.status == 0, "\(verify.standardOutput)\n\(verify.standardError)")
            #expect(verify.standardOutput.contains("checked 2 remote files: all agree"), "\(verify.standardOutput)")
        }
    }

    @Test("refused credentials: the error says it once, without type names, and says to check the credentials")
    func refusedCredentialsAreExplained() async throws {
        try await Self.withNewBucket("demo-denied") { bucket in
            let tool = try CommandLineTool.locate()
            var wrong = Self.credentials
            wrong["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
            let demo = try await tool.run(
                ["demo", "--s3", Self.url(bucket: bucket.name), "--count", "2", "--timeout", "30"], environment: wrong)
            let endpoint = String(Self.url(bucket: "").dropLast())
            let gc = try await withTemporaryDirectory { folder in
                let path = folder.appendingPathComponent("app.sqlite").path
                try await LocalDatabase(path: path, schema: Schema(tables: [createAttachmentTable()])).close()
                return try await tool.run(
                    ["gc", "--remote", "s3://\(bucket.name)/", "--endpoint", endpoint, "--db", path],
                    environment: wrong)
            }
            for (name, result) in [("demo", demo), ("gc", gc)] {
                #expect(result.status == 1, "\(name): \(result.standardError)")
                let text = result.standardError
                #expect(text.contains("403"), "\(name): \(text)")
                #expect(!text.contains("AttachmentError") && !text.contains("RemoteHTTPError"), "\(name): \(text)")
                #expect(text.components(separatedBy: "(request id").count <= 2, "said once: \(name): \(text)")
                #expect(text.components(separatedBy: "SignatureDoesNotMatch").count <= 2, "said once: \(name): \(text)")
                #expect(!text.contains(" of \"\""), "no empty key: \(name): \(text)")
                #expect(text.contains("check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"), "\(name): \(text)")
                #expect(!text.contains("not-the-secret"))
            }
        }
    }

    @Test("an unreachable server's error names the operation without an empty key")
    func unreachableWithoutEmptyKey() async throws {
        let result = try await CommandLineTool.locate().run(
            ["demo", "--s3", "http://127.0.0.1:9/no-such-server", "--count", "2", "--timeout", "20"],
            environment: Self.credentials, seconds: 60)
        #expect(result.status == 1)
        #expect(!result.standardError.contains(" of \"\""), "\(result.standardError)")
        #expect(!result.standardError.contains("AttachmentError"), "\(result.standardError)")
    }

    @Test("Ctrl-C during an S3 demo deletes the objects it wrote and the working folder")
    func interruptedDemoCleansTheBucket() async throws {
        try await Self.withNewBucket("demo-sigint") { bucket in
            let tool = try CommandLineTool.locate()
            // Capped at 128 KiB/s, 40 photos of 20 to 200 KiB (4.3 MiB) take over 30 s to upload and as long to
            // download: when a quarter are uploaded, the demo is a minute from its end, and the signal comes then.
            let running = try tool.start(
                [
                    "demo", "--s3", Self.url(bucket: bucket.name), "--count", "40", "--bwlimit", "128K", "--timeout",
                    "600",
                ], environment: Self.credentials)
            let output = try await running.waitForOutput(containing: "A  uploaded ")
            let storage = try bucket.makeStorage()
            let written = try await storage.listKeys()
            #expect(!written.isEmpty, "the demo had written objects when it was interrupted")
            running.send(SIGINT)
            let result = try await running.wait()
            let keys = try await storage.listKeys()
            try await storage.shutdown()
            #expect(result.status == 130, "stdout: \(result.standardOutput)\nstderr: \(result.standardError)")
            #expect(keys.isEmpty, "left behind: \(keys)")
            #expect(result.standardOutput.contains("removed the demo's objects under s3://\(bucket.name)/"))
            let folder = try #require(
                output.split(separator: "\n").first { $0.hasPrefix("working folder ") }
                    .map { String($0.dropFirst("working folder ".count)).trimmingCharacters(in: .whitespaces) })
            #expect(!FileManager.default.fileExists(atPath: folder))
        }
    }
}
