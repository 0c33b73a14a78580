import AttachmentSync
import Foundation
import NIOCore
import NIOHTTP1
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// The S3 adapter's decisions that need no server: configuration checks, credentials caching, error
/// classification, URLs.
@Suite struct S3RemoteStorageUnitTests {
    static func configuration(
        _ configure: (inout S3RemoteStorage.Configuration) -> Void = { _ in }
    ) -> S3RemoteStorage.Configuration {
        var configuration = S3RemoteStorage.Configuration(
            endpoint: URL(string: "http://127.0.0.1:7480")!, bucket: "photos",
            credentials: .static(accessKeyId: "AKID", secretAccessKey: "secret"))
        configure(&configuration)
        return configuration
    }

    @Test("printing or dumping a configuration shows no secret and no session token")
    func configurationHidesSecrets() {
        var configuration = Self.configuration()
        configuration.credentials = .static(
            accessKeyId: "AKIDVISIBLE", secretAccessKey: "very-secret-key", sessionToken: "very-secret-token")
        var dumped = ""
        dump(configuration, to: &dumped)
        for text in [String(describing: configuration), String(reflecting: configuration), dumped] {
            #expect(text.contains("AKIDVISIBLE"))
            #expect(!text.contains("very-secret-key"))
            #expect(!text.contains("very-secret-token"))
        }
    }

    @Test("options out of range are rejected with invalidConfiguration naming the option")
    func invalidOptionsAreRejected() throws {
        let cases: [(String, (inout S3RemoteStorage.Configuration) -> Void)] = [
            ("partSize", { $0.partSize = 5 * 1024 * 1024 - 1 }),
            ("multipartThreshold", { $0.multipartThreshold = 1024 }),
            ("partConcurrency", { $0.partConcurrency = 0 }),
            ("bucket", { $0.bucket = "" }),
            ("endpoint", { $0.endpoint = URL(string: "ftp://example.com")! }),
            ("requestTimeout", { $0.requestTimeout = .zero }),
            ("credentials", { $0.credentials = .static(accessKeyId: "", secretAccessKey: "") }),
        ]
        for (option, change) in cases {
            let error = #expect(throws: AttachmentError.self) {
                _ = try S3RemoteStorage(configuration: Self.configuration(change))
            }
            #expect(error?.code == .invalidConfiguration, "\(option)")
            #expect(error?.name == option)
            #expect(error?.message.contains(option) == true)
        }
    }

    @Test("429 and 503 are overload (the queue slows down); other statuses are not")
    func overloadStatuses() {
        #expect(RemoteHTTPError(statusCode: 429).isOverload)
        #expect(RemoteHTTPError(statusCode: 503, code: "SlowDown").isOverload)
        #expect(!RemoteHTTPError(statusCode: 500).isOverload)
        #expect(!RemoteHTTPError(statusCode: 403).isOverload)
    }

    @Test("the defaults are valid: multipart above 16 MiB in 8 MiB parts, 4 at once")
    func defaultsAreValid() async throws {
        let configuration = Self.configuration()
        #expect(configuration.multipartThreshold == 16 * 1024 * 1024)
        #expect(configuration.partSize == 8 * 1024 * 1024)
        #expect(configuration.partConcurrency == 4)
        #expect(configuration.addressing == .path)
        let storage = try S3RemoteStorage(configuration: configuration)
        try await storage.shutdown()
        try await storage.shutdown()  // a second call does nothing
    }

    @Test("a file that would need more than 10,000 parts gets bigger parts")
    func partSizeGrowsForHugeFiles() async throws {
        let storage = try S3RemoteStorage(configuration: Self.configuration())
        let hundredGiB: Int64 = 100 * 1024 * 1024 * 1024
        let partSize = storage.partSize(forFileOfSize: hundredGiB)
        #expect((hundredGiB + partSize - 1) / partSize <= 10_000)
        #expect(partSize % (1024 * 1024) == 0)
        #expect(storage.partSize(forFileOfSize: 20 * 1024 * 1024) == 8 * 1024 * 1024)
        try await storage.shutdown()
    }

    @Test("path-style and virtual-host URLs name the bucket where each expects it")
    func addressingShapesTheURL() async throws {
        let pathStyle = try S3RemoteStorage(
            configuration: Self.configuration {
                $0.endpoint = URL(string: "https://storage.example.com:9000/s3/")!
                $0.keyPrefix = "app/"
            })
        let target = pathStyle.target(key: "app/a b.jpg")
        #expect(target.scheme == "https")
        #expect(target.host == "storage.example.com:9000")
        #expect(target.path == "/s3/photos/app/a b.jpg")
        try await pathStyle.shutdown()

        let virtualHost = try S3RemoteStorage(
            configuration: Self.configuration {
                $0.endpoint = URL(string: "https://s3.eu-west-1.amazonaws.com")!
                $0.addressing = .virtualHost
            })
        let virtualTarget = virtualHost.target(key: "a.jpg")
        #expect(virtualTarget.host == "photos.s3.eu-west-1.amazonaws.com")
        #expect(virtualTarget.path == "/a.jpg")
        #expect(virtualHost.target(key: nil).path == "/")
        try await virtualHost.shutdown()
    }

    // MARK: - Credentials

    @Test("custom credentials are fetched once, shared by concurrent requests, and refreshed before they expire")
    func customCredentialsAreCachedAndRefreshed() async throws {
        let now = LockedValue(Date(timeIntervalSince1970: 1_000_000))
        let calls = LockedValue(0)
        let provider = S3RemoteStorage.CredentialsProvider.custom {
            let call = calls.withLock { count -> Int in
                count += 1
                return count
            }
            return S3Credentials(
                accessKeyId: "AKID\(call)", secretAccessKey: "secret", sessionToken: "token\(call)",
                expiration: now.withLock { $0 }.addingTimeInterval(3600))
        }
        let cache = CredentialsCache(provider: provider, refreshMargin: .seconds(300)) { now.withLock { $0 } }

        let first = try await withThrowingTaskGroup(of: S3Credentials.self) { group in
            for _ in 0..<8 {
                group.addTask { try await cache.current() }
            }
            return try await group.reduce(into: [S3Credentials]()) { $0.append($1) }
        }
        #expect(Set(first.map(\.accessKeyId)) == ["AKID1"])
        #expect(calls.withLock { $0 } == 1)

        now.withLock { $0 = $0.addingTimeInterval(3000) }  // 10 minutes before expiry: still fine
        #expect(try await cache.current().accessKeyId == "AKID1")
        now.withLock { $0 = $0.addingTimeInterval(301) }  // inside the 5-minute margin
        #expect(try await cache.current().accessKeyId == "AKID2")
        await cache.invalidate()  // the server refused them
        #expect(try await cache.current().accessKeyId == "AKID3")
    }

    @Test("credentials come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN")
    func environmentCredentials() throws {
        let credentials = try CredentialsCache.fromEnvironment([
            "AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "env-secret", "AWS_SESSION_TOKEN": "env-token",
        ])
        #expect(
            credentials
                == S3Credentials(accessKeyId: "AKIDENV", secretAccessKey: "env-secret", sessionToken: "env-token"))
        let missing = #expect(throws: AttachmentError.self) {
            _ = try CredentialsCache.fromEnvironment(["AWS_ACCESS_KEY_ID": "AKIDENV"])
        }
        #expect(missing?.code == .invalidConfiguration)
    }

    @Test("a failing credentials provider is accessDenied")
    func failingProviderIsAccessDenied() async throws {
        let cache = CredentialsCache(
            provider: .custom { throw URLError(.notConnectedToInternet) }, refreshMargin: .seconds(300))
        let error = await #expect(throws: AttachmentError.self) { _ = try await cache.current() }
        #expect(error?.code == .accessDenied)
    }

    // MARK: - Errors

    @Test(
        "HTTP statuses and S3 error codes map to the attachment error codes",
        arguments: [
            (404, "NoSuchKey", AttachmentError.Code.remoteNotFound),
            (404, nil, .remoteNotFound),
            (404, "NoSuchBucket", .remoteFailure),
            (404, "NoSuchUpload", .remoteFailure),
            (403, "AccessDenied", .accessDenied),
            (403, "SignatureDoesNotMatch", .accessDenied),
            (403, "InvalidAccessKeyId", .accessDenied),
            (400, "ExpiredToken", .accessDenied),
            (401, nil, .accessDenied),
            (503, "SlowDown", .remoteUnavailable),
            (429, nil, .remoteUnavailable),
            (500, "InternalError", .remoteUnavailable),
            (502, nil, .remoteUnavailable),
            (400, "BadDigest", .integrityMismatch),
            (400, "InvalidDigest", .integrityMismatch),
            (400, "XAmzContentSHA256Mismatch", .integrityMismatch),
            (400, "InvalidArgument", .remoteFailure),
            (409, nil, .remoteFailure),
        ] as [(Int, String?, AttachmentError.Code)])
    func classification(status: Int, s3Code: String?, expected: AttachmentError.Code) {
        #expect(HTTPErrorClassification.classify(status: status, s3Code: s3Code) == expected)
    }

    @Test("Retry-After is honoured in seconds and as an HTTP date")
    func retryAfterIsParsed() {
        let now = Date(timeIntervalSince1970: 1_784_000_000)
        #expect(HTTPErrorClassification.retryAfter("120", now: now) == .seconds(120))
        let later = now.addingTimeInterval(90)
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        #expect(HTTPErrorClassification.retryAfter(formatter.string(from: later), now: now) == .seconds(90))
        #expect(
            HTTPErrorClassification.retryAfter(formatter.string(from: now.addingTimeInterval(-60)), now: now) == .zero)
        #expect(HTTPErrorClassification.retryAfter("soon", now: now) == nil)
        #expect(HTTPErrorClassification.retryAfter(nil, now: now) == nil)
    }

    @Test("Retry-After values no integer can hold, and timeouts of any length, saturate instead of trapping")
    func absurdDurationsSaturate() {
        let now = Date(timeIntervalSince1970: 1_784_000_000)
        // A date in a year far beyond any Int64 count of milliseconds from now.
        for value in [
            "Fri, 31 Dec 999999999 23:59:59 GMT", "Sat, 01 Jan 292277026596 00:00:00 GMT", "99999999999999999999",
        ] {
            let delay = HTTPErrorClassification.retryAfter(value, now: now)
            #expect(delay == nil || delay! > .seconds(86_400 * 365), "\(value)")
        }
        #expect(HTTPErrorClassification.retryAfter("9223372036854775807", now: now) == .seconds(Int64.max))
        #expect(AsyncHTTPClientEngine.timeAmount(.seconds(Int64.max)) == .nanoseconds(Int64.max))
        #expect(AsyncHTTPClientEngine.timeAmount(.seconds(3)) == .seconds(3))
        #expect(AsyncHTTPClientEngine.timeAmount(.milliseconds(1500)) == .milliseconds(1500))
    }

    @Test("a 503 SlowDown carries the server's Retry-After, its code and request id, and names the object")
    func slowDownErrorCarriesRetryAfter() {
        let body = Data(
            ("<?xml version=\"1.0\"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate."
                + "</Message></Error>").utf8)
        let error = HTTPErrorClassification.error(
            status: .serviceUnavailable,
            headers: ["Retry-After": "7", "x-amz-request-id": "tx-1"], body: body, service: "S3",
            operation: "PutObject", object: "app/a.jpg", attachmentId: "a", now: Date())
        #expect(error.code == .remoteUnavailable)
        #expect(error.retryAfter == .seconds(7))
        #expect(error.attachmentId == "a")
        #expect(
            error.underlying as? RemoteHTTPError
                == RemoteHTTPError(
                    statusCode: 503, code: "SlowDown", message: "Please reduce your request rate.", requestId: "tx-1"))
        #expect(error.description.contains("\"app/a.jpg\""))
    }

    @Test("an error's text says each fact once, without type names; a request on no object names none")
    func errorTextSaysItOnce() {
        let body = Data("<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code></Error>".utf8)
        let denied = HTTPErrorClassification.error(
            status: .forbidden, headers: ["x-amz-request-id": "tx-9"], body: body, service: "S3",
            operation: "CreateBucket", object: "photos", attachmentId: nil, now: Date())
        #expect(
            denied.description
                == "accessDenied: S3 CreateBucket of \"photos\" failed: HTTP 403 SignatureDoesNotMatch (request id tx-9)"
        )
        let unreachable = HTTPErrorClassification.transportError(
            InjectedTransportFailure(), service: "S3", operation: "CreateBucket", object: "", attachmentId: nil)
        let text = "\(unreachable)"
        #expect(text.hasPrefix("remoteUnavailable: S3 CreateBucket failed: the server could not be reached"), "\(text)")
        #expect(text.hasSuffix("(connection refused)"), "\(text)")
        #expect(!text.contains("AttachmentError") && !text.contains("of \"\""), "\(text)")
    }

    /// A failure below HTTP, as a client reports one.
    struct InjectedTransportFailure: Error, CustomStringConvertible {
        var description: String { "connection refused" }
    }

    @Test("Content-Range headers are read, unsatisfiable ranges included")
    func contentRangeIsParsed() {
        #expect(ContentRange("bytes 100-199/1000") == ContentRange(start: 100, end: 199, total: 1000))
        #expect(ContentRange("bytes */1000") == ContentRange(start: nil, end: nil, total: 1000))
        #expect(ContentRange("items 1-2/3") == nil)
    }
}

extension ContentRange {
    init(start: Int64?, end: Int64?, total: Int64?) {
        self.init("bytes */0")!
        self.start = start
        self.end = end
        self.total = total
    }
}
