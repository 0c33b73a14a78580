import AttachmentSync
import Foundation
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// The pure parts of presigned storage: the issuer's checks, the authorisation cache, the closure's errors.
@Suite("Presigned storage, without a server")
struct PresignedUnitTests {
    static let mebibyte: Int64 = 1024 * 1024

    static func issuer(maxObjectSize: Int64 = 100 * 1024 * 1024) throws -> PresignedURLIssuer {
        var issuer = try PresignedURLIssuer(
            storage: .init(
                endpoint: URL(string: "https://s3.example.com")!, region: "eu-west-1", bucket: "files",
                credentials: .static(accessKeyId: "AKIDEXAMPLE", secretAccessKey: "secret-key-never-shown"),
                keyPrefix: "app/"),
            maxObjectSize: maxObjectSize)
        issuer.now = { Date(timeIntervalSince1970: 1_800_000_000) }
        // No server here to check confinement on (the Ceph tests do).
        issuer.verifiesConfinement = false
        return issuer
    }

    static func part(_ number: Int, length: Int64, uploadId: String? = "upload-1") -> PresignedOperation {
        var operation = PresignedOperation(kind: .uploadPart, filename: "clip.mov")
        operation.partNumber = number
        operation.contentLength = length
        operation.uploadId = uploadId
        return operation
    }

    @Test("a put is signed for the key under the prefix, with its length, checksums and If-None-Match")
    func putSignsWhatItChecks() async throws {
        let issuer = try Self.issuer().forUser(prefix: "users/u1/")
        var put = PresignedOperation(kind: .put, filename: "photo 1.jpg")
        put.contentLength = 1234
        put.contentMD5 = Data(count: 16).base64EncodedString()
        put.sha256 = String(repeating: "AB", count: 32)
        put.contentType = "image/jpeg"
        put.createOnly = false
        let authorization = try await issuer.authorize(put)
        #expect(authorization.url.path == "/files/app/users/u1/photo 1.jpg")
        #expect(
            authorization.headers == [
                "content-length": "1234", "content-md5": put.contentMD5!,
                "x-amz-meta-sha256": String(repeating: "ab", count: 32),
                "content-type": "image/jpeg", "if-none-match": "*", "x-amz-acl": "bucket-owner-full-control",
            ])
        let query = URLComponents(url: authorization.url, resolvingAgainstBaseURL: false)?.queryItems ?? []
        let signed = query.first { $0.name == "X-Amz-SignedHeaders" }?.value
        #expect(signed == "content-length;content-md5;content-type;host;if-none-match;x-amz-acl;x-amz-meta-sha256")
        #expect(query.first { $0.name == "X-Amz-Expires" }?.value == "900")
        #expect(authorization.expiresAt == Date(timeIntervalSince1970: 1_800_000_900))
        #expect(!authorization.description.contains("X-Amz"))
        #expect(authorization.description.contains("?<redacted>"))
    }

    @Test("parts are limited in number, size and by what the object may still hold")
    func partLimits() async throws {
        let issuer = try Self.issuer(maxObjectSize: 100 * Self.mebibyte)
        #expect(issuer.maxPartSize == 16 * Self.mebibyte)
        _ = try await issuer.authorize(Self.part(1, length: 16 * Self.mebibyte))
        _ = try await issuer.authorize(Self.part(19, length: 10 * Self.mebibyte))
        let refusals: [(PresignedOperation, String)] = [
            (Self.part(1, length: 16 * Self.mebibyte + 1), "contentLength"),
            (Self.part(20, length: 6 * Self.mebibyte), "contentLength"),
            (Self.part(21, length: 1), "contentLength"),
            (Self.part(0, length: 1), "partNumber"),
            (Self.part(10_001, length: 1), "partNumber"),
            (Self.part(1, length: 0), "contentLength"),
            (Self.part(1, length: 1, uploadId: nil), "uploadId"),
            (Self.part(1, length: 1, uploadId: "a\nb"), "uploadId"),
        ]
        for (operation, name) in refusals {
            let error = await #expect(throws: AttachmentError.self, "\(operation)") {
                try await issuer.authorize(operation)
            }
            #expect(error?.code == .accessDenied)
            #expect(error?.name == name, "\(operation)")
        }
        // A 5 TiB limit needs parts above 16 MiB to fit 10,000 of them.
        #expect(try Self.issuer(maxObjectSize: PresignedURLIssuer.largestObjectSize).maxPartSize == 525 * Self.mebibyte)
    }

    @Test("operations outside allowedOperations, bad prefixes and bad markers are refused, naming the value")
    func refusals() async throws {
        var issuer = try Self.issuer()
        issuer.allowedOperations.remove(.delete)
        let delete = await #expect(throws: AttachmentError.self) {
            try await issuer.authorize(PresignedOperation(kind: .delete, filename: "a.jpg"))
        }
        #expect(delete?.code == .accessDenied)
        #expect(delete?.message.contains("delete") == true)
        for prefix in ["", "u1", "/u1/", "u1//", "../u1/", "u1/./", "u\u{7F}/"] {
            #expect(throws: AttachmentError.self, "\(String(reflecting: prefix))") {
                try issuer.forUser(prefix: prefix)
            }
        }
        var list = PresignedOperation(kind: .listParts, filename: "a.jpg")
        list.uploadId = "u"
        list.partNumberMarker = "12&x=1"
        let marker = await #expect(throws: AttachmentError.self) { try await issuer.authorize(list) }
        #expect(marker?.name == "partNumberMarker")
        var create = PresignedOperation(kind: .createMultipartUpload, filename: "a.jpg")
        let missing = await #expect(throws: AttachmentError.self) { try await issuer.authorize(create) }
        #expect(missing?.name == "objectSize")
        create.objectSize = 100 * Self.mebibyte + 1
        let tooBig = await #expect(throws: AttachmentError.self) { try await issuer.authorize(create) }
        #expect(tooBig?.message.contains("104857601") == true)
    }

    @Test("operations travel as JSON unchanged")
    func operationsAreCodable() throws {
        var operation = Self.part(3, length: 42)
        operation.contentMD5 = "md5"
        let decoded = try JSONDecoder().decode(
            PresignedOperation.self, from: JSONEncoder().encode(operation))
        #expect(decoded == operation)
        let authorization = PresignedAuthorization(
            url: URL(string: "https://h/b/k?X-Amz-Signature=abc")!, headers: ["content-length": "42"],
            expiresAt: Date(timeIntervalSince1970: 5))
        #expect(
            try JSONDecoder().decode(PresignedAuthorization.self, from: JSONEncoder().encode(authorization))
                == authorization)
    }

    @Test("concurrent requests for one operation share one call; different operations do not")
    func concurrentRequestsShareOneCall() async throws {
        let gate = AsyncGate()
        let calls = LockedValue(0)
        let cache = PresignedAuthorizations(
            authorize: { operation in
                calls.withLock { $0 += 1 }
                await gate.wait()
                return PresignedAuthorization(
                    url: URL(string: "https://h/\(operation.filename)")!, expiresAt: .distantFuture)
            }, margin: .seconds(60), now: { Date() })
        let operation = PresignedOperation(kind: .get, filename: "a")
        try await withThrowingTaskGroup(of: URL.self) { group in
            for _ in 0..<5 {
                group.addTask { try await cache.authorization(for: operation, renewing: false).url }
            }
            group.addTask {
                try await cache.authorization(for: PresignedOperation(kind: .get, filename: "b"), renewing: false).url
            }
            // Both distinct operations have called the closure before the gate opens.
            try await withDeadline(seconds: 30, "two closure calls") {
                while calls.withLock({ $0 }) < 2 { await Task.yield() }
            }
            await gate.open()
            var urls: [URL] = []
            for try await url in group { urls.append(url) }
            #expect(urls.filter { $0.path == "/a" }.count == 5)
        }
        #expect(calls.withLock { $0 } == 2)
        #expect(await cache.calls == 2)
    }

    @Test(
        "the closure's errors become typed: refusals accessDenied, failures remoteUnavailable, bad URLs remoteFailure")
    func closureErrorsAreTyped() async throws {
        let cases: [(any Error & Sendable, AttachmentError.Code)] = [
            (PresignedRemoteStorage.Denied("quota"), .accessDenied),
            (RemoteHTTPError(statusCode: 403), .accessDenied),
            (RemoteHTTPError(statusCode: 401), .accessDenied),
            (RemoteHTTPError(statusCode: 502), .remoteUnavailable),
            (URLError(.notConnectedToInternet), .remoteUnavailable),
            (AttachmentError(code: .conflict, message: "as it is"), .conflict),
        ]
        for (thrown, code) in cases {
            let cache = PresignedAuthorizations(
                authorize: { _ in throw thrown }, margin: .zero, now: { Date() })
            let error = await #expect(throws: AttachmentError.self, "\(thrown)") {
                try await cache.authorization(for: PresignedOperation(kind: .head, filename: "a"), renewing: false)
            }
            #expect(error?.code == code, "\(thrown)")
        }
        let file = PresignedAuthorizations(
            authorize: { _ in
                PresignedAuthorization(url: URL(fileURLWithPath: "/etc/passwd"), expiresAt: .distantFuture)
            },
            margin: .zero, now: { Date() })
        let error = await #expect(throws: AttachmentError.self) {
            try await file.authorization(for: PresignedOperation(kind: .get, filename: "a"), renewing: false)
        }
        #expect(error?.code == .remoteFailure)
        #expect(error?.message.contains("passwd") == false)
    }

    @Test("an authorisation is reused up to the renewal margin before its expiry, renewed from there and on demand")
    func renewalMargin() async throws {
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        let now = LockedValue(start)
        let calls = LockedValue(0)
        let cache = PresignedAuthorizations(
            authorize: { _ in
                let call = calls.withLock { calls -> Int in
                    calls += 1
                    return calls
                }
                return PresignedAuthorization(
                    url: URL(string: "https://h/\(call)")!, expiresAt: start.addingTimeInterval(900))
            }, margin: .seconds(60), now: { now.withLock { $0 } })
        let operation = PresignedOperation(kind: .get, filename: "a")
        #expect(try await cache.authorization(for: operation, renewing: false).url.path == "/1")
        now.withLock { $0 = start.addingTimeInterval(839) }
        #expect(try await cache.authorization(for: operation, renewing: false).url.path == "/1")
        now.withLock { $0 = start.addingTimeInterval(840) }
        #expect(try await cache.authorization(for: operation, renewing: false).url.path == "/2")
        #expect(try await cache.authorization(for: operation, renewing: true).url.path == "/3")
        await cache.invalidate(operation)
        #expect(try await cache.authorization(for: operation, renewing: false).url.path == "/4")
    }

    @Test("each S3 request maps to the operation a backend checks")
    func requestsMapToOperations() throws {
        let body = S3Request.Body.data(Data(count: 7))
        var put = S3Request(
            method: .put, key: "a.jpg",
            headers: [("content-md5", "m"), ("x-amz-meta-sha256", "h"), ("content-type", "t"), ("if-none-match", "*")],
            body: body, operation: "PutObject")
        var expected = PresignedOperation(kind: .put, filename: "a.jpg")
        expected.contentLength = 7
        expected.contentMD5 = "m"
        expected.sha256 = "h"
        expected.contentType = "t"
        expected.createOnly = true
        #expect(try PresignedOperation(put) == expected)
        put.headers = []
        #expect(try PresignedOperation(put).createOnly == false)
        let part = S3Request(
            method: .put, key: "a.jpg", query: [("partNumber", "4"), ("uploadId", "u")], body: body,
            operation: "UploadPart")
        #expect(
            try PresignedOperation(part)
                == {
                    var operation = PresignedOperation(kind: .uploadPart, filename: "a.jpg")
                    operation.partNumber = 4
                    operation.uploadId = "u"
                    operation.contentLength = 7
                    return operation
                }())
        let ranged = S3Request(method: .get, key: "a.jpg", headers: [("range", "bytes=100-")], operation: "GetObject")
        #expect(try PresignedOperation(ranged).rangeStart == 100)
        let listing = S3Request(method: .get, key: nil, operation: "ListObjectsV2")
        #expect(throws: AttachmentError.self) { try PresignedOperation(listing) }
    }
}

/// A gate tasks wait at until it opens (no sleeping).
actor AsyncGate {
    private var isOpen = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    func wait() async {
        if isOpen { return }
        await withCheckedContinuation { waiters.append($0) }
    }

    func open() {
        isOpen = true
        for waiter in waiters { waiter.resume() }
        waiters = []
    }
}
