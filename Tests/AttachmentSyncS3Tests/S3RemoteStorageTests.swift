import AsyncHTTPClient
import AttachmentSync
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// S3RemoteStorage against the real Ceph S3 gateway on 127.0.0.1 (`scripts/s3-server start`).
@Suite("S3RemoteStorage on Ceph")
struct S3RemoteStorageTests {
    static let mebibyte = 1024 * 1024
    static let fiveMiB: Int64 = 5 * 1024 * 1024

    @Test("files of 0 bytes, 1 KiB and 12 MiB (multipart, 5 MiB parts) come back byte for byte")
    func roundTripsFilesOfEverySize() async throws {
        let requests = LockedValue<[String]>([])
        let configure: (inout S3RemoteStorage.Configuration) -> Void = { configuration in
            configuration.multipartThreshold = Self.fiveMiB
            configuration.partSize = Self.fiveMiB
            configuration.requestObserver = { event in requests.withLock { $0.append(event.operation) } }
        }
        try await S3TestBucket.with("roundtrip", configure: configure) { storage, _ in
            try await withTemporaryDirectory { directory in
                for (index, size) in [0, 1024, 12 * Self.mebibyte].enumerated() {
                    let content = testBytes(count: size, seed: UInt32(index))
                    let source = directory.appendingPathComponent("source-\(index)")
                    try content.write(to: source)
                    let file = attachment("file-\(index).bin", mediaType: "application/octet-stream")
                    requests.withLock { $0 = [] }
                    let uploadProgress = ProgressRecorder()
                    try await storage.uploadFile(fileURL: source, attachment: file, progress: uploadProgress.handler)
                    let total = Int64(size)
                    #expect(uploadProgress.last == TransferProgress(completedBytes: total, totalBytes: total))
                    let expectedRequests =
                        total > Self.fiveMiB
                        ? [
                            // Create-only: a HEAD before the upload starts, before it completes and after.
                            "CompleteMultipartUpload", "CreateMultipartUpload", "HeadObject", "HeadObject",
                            "HeadObject", "UploadPart", "UploadPart", "UploadPart",
                        ]
                        : ["PutObject"]
                    #expect(requests.withLock { $0 }.sorted() == expectedRequests)

                    let destination = directory.appendingPathComponent("nested/destination-\(index)")
                    let downloadProgress = ProgressRecorder()
                    try await storage.downloadFile(
                        attachment: file, to: destination, progress: downloadProgress.handler)
                    #expect(try Data(contentsOf: destination) == content, "streamed download of \(size) bytes")
                    #expect(downloadProgress.last == TransferProgress(completedBytes: total, totalBytes: total))
                    let inMemory = try await storage.downloadFile(attachment: file)
                    #expect(inMemory == content, "Data download of \(size) bytes")
                }
            }
        }
    }

    @Test("a listing crosses pages with continuation tokens and keeps to the key prefix, one level deep")
    func listingPages() async throws {
        let underPrefix: (inout S3RemoteStorage.Configuration) -> Void = { $0.keyPrefix = "photos/" }
        try await S3TestBucket.with("listing", configure: underPrefix) { storage, bucket in
            let names = ["a b.jpg", "c+d.jpg", "e.jpg", "z.bin", "é.jpg"]  // in UTF-8 byte order, as S3 lists
            for (index, name) in names.enumerated() {
                try await storage.uploadFile(data: testBytes(count: index * 10), attachment: attachment(name))
            }
            try await bucket.withStorage({ $0.keyPrefix = "" }) { root in
                try await root.uploadFile(data: Data("outside".utf8), attachment: attachment("photos-not.jpg"))
                try await root.uploadFile(data: Data("deeper".utf8), attachment: attachment("photos/thumbs/a.jpg"))
            }
            var listed: [RemoteFile] = []
            var continuation: String?
            var pages = 0
            repeat {
                let page = try await storage.listFiles(after: continuation, pageSize: 2)
                #expect(page.files.count <= 2)
                listed += page.files
                continuation = page.next
                pages += 1
            } while continuation != nil && pages < 10
            #expect(pages == 3)
            #expect(listed.map(\.storedName) == names, "every page, in key order, only directly under the prefix")
            #expect(listed.map(\.size) == names.indices.map { Int64($0 * 10) })
            #expect(listed.allSatisfy { abs($0.lastModified?.timeIntervalSinceNow ?? 1e9) < 3_600 })
            #expect(try await storage.allFiles().map(\.storedName) == names)
        }
    }

    @Test("keys with spaces, unicode and reserved characters, under a key prefix, round trip")
    func roundTripsAwkwardKeys() async throws {
        let configure: (inout S3RemoteStorage.Configuration) -> Void = { $0.keyPrefix = "app one/user+1/" }
        try await S3TestBucket.with("keys", configure: configure) { storage, _ in
            let names = ["photo 1 (copy).jpg", "résumé-ሴ.pdf", "a+b=c&d;e,f@g$h!'*~%20#x?.txt", "..", "a//b"]
            for (index, name) in names.enumerated() {
                let content = Data("content \(index)".utf8)
                try await storage.uploadFile(data: content, attachment: attachment(name))
                #expect(try await storage.downloadFile(attachment: attachment(name)) == content, "key \(name)")
            }
            let keys = try await storage.listKeys()
            #expect(Set(keys) == Set(names.map { "app one/user+1/" + $0 }))
        }
    }

    @Test("uploads are create-only: the same content again succeeds, other content is a conflict and kept out")
    func createOnlyUploads() async throws {
        let requests = LockedValue<[String]>([])
        let observe: (inout S3RemoteStorage.Configuration) -> Void = { configuration in
            configuration.multipartThreshold = Self.fiveMiB
            configuration.partSize = Self.fiveMiB
            configuration.requestObserver = { event in requests.withLock { $0.append(event.operation) } }
        }
        try await S3TestBucket.with("createonly", configure: observe) { storage, bucket in
            try await withTemporaryDirectory { directory in
                let file = attachment("photo.jpg")
                let first = Data("first version".utf8)
                try await storage.uploadFile(data: first, attachment: file)
                try await storage.uploadFile(data: first, attachment: file)
                let conflict = await #expect(throws: AttachmentError.self) {
                    try await storage.uploadFile(data: Data("second".utf8), attachment: file)
                }
                #expect(conflict?.code == .conflict)
                #expect(conflict?.message.contains("photo.jpg") == true)
                #expect(try await storage.downloadFile(attachment: file) == first, "Ceph honoured If-None-Match")

                // A multipart upload looks first: a different big object under the key is a conflict too,
                // and no upload is started.
                let big = attachment("big.bin")
                let source = directory.appendingPathComponent("big")
                try testBytes(count: 6 * Self.mebibyte, seed: 4).write(to: source)
                try await storage.uploadFile(data: testBytes(count: 100, seed: 5), attachment: big)
                requests.withLock { $0 = [] }
                await #expect(throws: AttachmentError.self) {
                    try await storage.uploadFile(fileURL: source, attachment: big) { _ in }
                }
                #expect(!requests.withLock { $0 }.contains("CreateMultipartUpload"))
                #expect(try await storage.listMultipartUploadIds().isEmpty)

                // With createOnly off, an upload replaces the object as plain S3 does.
                try await bucket.withStorage({ $0.createOnly = false }) { replacing in
                    try await replacing.uploadFile(data: Data("second".utf8), attachment: file)
                }
                #expect(try await storage.downloadFile(attachment: file) == Data("second".utf8))
            }
        }
    }

    @Test("deleting twice, or deleting a name never uploaded, succeeds")
    func deleteIsIdempotent() async throws {
        try await S3TestBucket.with("delete") { storage, _ in
            let file = attachment("photo.jpg")
            try await storage.uploadFile(data: Data("x".utf8), attachment: file)
            try await storage.deleteFile(attachment: file)
            try await storage.deleteFile(attachment: file)
            try await storage.deleteFile(attachment: attachment("never-uploaded.jpg"))
            await #expect(throws: AttachmentError.self) { try await storage.downloadFile(attachment: file) }
        }
    }

    @Test("downloading a missing object is remoteNotFound, in every form")
    func missingObjectIsRemoteNotFound() async throws {
        try await S3TestBucket.with("notfound") { storage, _ in
            try await withTemporaryDirectory { directory in
                let missing = attachment("missing.jpg")
                let inMemory = await #expect(throws: AttachmentError.self) {
                    try await storage.downloadFile(attachment: missing)
                }
                #expect(inMemory?.code == .remoteNotFound)
                #expect(inMemory?.attachmentId == missing.id)
                let destination = directory.appendingPathComponent("out")
                let streamed = await #expect(throws: AttachmentError.self) {
                    try await storage.downloadFile(attachment: missing, to: destination) { _ in }
                }
                #expect(streamed?.code == .remoteNotFound)
                #expect(!FileManager.default.fileExists(atPath: destination.path), "no empty file is left behind")
            }
        }
    }

    @Test("a download resumed from byte N appends the rest, and progress counts the whole file")
    func rangedDownloadResumes() async throws {
        try await S3TestBucket.with("ranged") { storage, _ in
            try await withTemporaryDirectory { directory in
                #expect(storage.supportsRangedDownloads)
                let content = testBytes(count: 3 * Self.mebibyte + 17)
                let file = attachment("video.mp4")
                try await storage.uploadFile(data: content, attachment: file)
                for offset in [1, 1_000_003, content.count - 1, content.count] {
                    let partial = directory.appendingPathComponent("partial-\(offset)")
                    try content.prefix(offset).write(to: partial)
                    let progress = ProgressRecorder()
                    try await storage.downloadFile(
                        attachment: file, appendingTo: partial, from: Int64(offset), progress: progress.handler)
                    #expect(try Data(contentsOf: partial) == content, "resumed at \(offset)")
                    #expect(progress.all.first?.completedBytes == Int64(offset))
                    #expect(
                        progress.last
                            == TransferProgress(completedBytes: Int64(content.count), totalBytes: Int64(content.count)))
                }
            }
        }
    }

    @Test("a large object comes down as ranges at once, byte for byte; one failed range leaves a prefix to resume")
    func largeDownloadsAreSplit() async throws {
        let gets = LockedValue(0)
        let failThird = LockedValue(false)
        let configure: (inout S3RemoteStorage.Configuration) -> Void = { configuration in
            configuration.parallelDownloadThreshold = 12 * Int64(Self.mebibyte)
            configuration.partSize = Self.fiveMiB
            configuration.partConcurrency = 3
            configuration.requestObserver = { event in
                guard event.operation == "GetObject" else { return }
                let count = gets.withLock {
                    $0 += 1
                    return $0
                }
                if count == 3, failThird.withLock({ $0 }) {
                    throw AttachmentError(code: .remoteUnavailable, message: "the third GET fails (injected)")
                }
            }
        }
        try await S3TestBucket.with("split", configure: configure) { storage, _ in
            try await withTemporaryDirectory { directory in
                // Four parts: three of 5 MiB and one of 1 MiB and 7 bytes.
                let content = testBytes(count: 16 * Self.mebibyte + 7, seed: 5)
                let file = attachment("video.mp4")
                try await storage.uploadFile(data: content, attachment: file)
                let destination = directory.appendingPathComponent("video")
                gets.withLock { $0 = 0 }
                let progress = ProgressRecorder()
                let info = try await storage.downloadFile(
                    attachment: file, into: destination, from: 0, progress: progress.handler)
                #expect(try Data(contentsOf: destination) == content)
                #expect(gets.withLock { $0 } == 4, "one whole GET (its first part) and three ranges")
                #expect(info.writtenSHA256 == FileStreaming.sha256(content))
                #expect(info.sha256 == FileStreaming.sha256(content))
                #expect(progress.last?.completedBytes == Int64(content.count))

                gets.withLock { $0 = 0 }
                failThird.withLock { $0 = true }
                let again = directory.appendingPathComponent("again")
                await #expect(throws: AttachmentError.self) {
                    _ = try await storage.downloadFile(attachment: file, into: again, from: 0) { _ in }
                }
                let kept = try Data(contentsOf: again)
                #expect(kept == content.prefix(kept.count), "no gap: only bytes in order from byte 0 are kept")
                failThird.withLock { $0 = false }
                let resumed = try await storage.downloadFile(
                    attachment: file, into: again, from: Int64(kept.count)
                ) { _ in }
                #expect(try Data(contentsOf: again) == content)
                #expect(resumed.size == Int64(content.count))
            }
        }
    }

    @Test("a wrong secret is accessDenied, and the secret appears in no error text")
    func wrongSecretIsAccessDeniedWithoutLeakingIt() async throws {
        try await S3TestBucket.with("denied") { _, bucket in
            let secret = "wrong-secret-\(UUID().uuidString)"
            let storage = try bucket.makeStorage {
                $0.credentials = .static(accessKeyId: bucket.server.accessKey, secretAccessKey: secret)
            }
            let file = attachment("photo.jpg")
            var errors: [AttachmentError] = []
            for operation in 0..<3 {
                do {
                    switch operation {
                    case 0: try await storage.uploadFile(data: Data("x".utf8), attachment: file)
                    case 1: _ = try await storage.downloadFile(attachment: file)
                    default: try await storage.deleteFile(attachment: file)
                    }
                    Issue.record("operation \(operation) succeeded with a wrong secret")
                } catch let error as AttachmentError {
                    errors.append(error)
                }
            }
            try await storage.shutdown()
            #expect(errors.map(\.code) == [.accessDenied, .accessDenied, .accessDenied])
            for error in errors {
                for text in [String(describing: error), String(reflecting: error), error.localizedDescription] {
                    #expect(!text.contains(secret))
                    #expect(!text.contains(bucket.server.secretKey))
                }
                #expect((error.underlying as? RemoteHTTPError)?.statusCode == 403)
            }
        }
    }

    @Test("credentials the server refuses are fetched again from the custom provider on the next request")
    func refusedCustomCredentialsAreRefetched() async throws {
        try await S3TestBucket.with("refetch") { _, bucket in
            let calls = LockedValue(0)
            // The first credentials have been revoked; the provider's next answer is good.
            let storage = try bucket.makeStorage { $0.credentials = bucket.credentialsRevokedOnce(counting: calls) }
            let file = attachment("photo.jpg")
            let refused = await #expect(throws: AttachmentError.self) {
                try await storage.uploadFile(data: Data("x".utf8), attachment: file)
            }
            #expect(refused?.code == .accessDenied)
            try await storage.uploadFile(data: Data("x".utf8), attachment: file)
            #expect(try await storage.downloadFile(attachment: file) == Data("x".utf8))
            #expect(calls.withLock { $0 } == 2, "fetched once more after the refusal, then cached")
            try await storage.shutdown()
        }
    }

    @Test("nothing logged at any level, the HTTP client's own lines included, contains a secret or a signature")
    func logsHoldNoSecrets() async throws {
        try await S3TestBucket.with("logs") { _, bucket in
            let lines = LockedValue<[String]>([])
            let logger = Logger(label: "test") { _ in CapturingLogHandler(lines: lines) }
            let good = try bucket.makeStorage { $0.logger = logger }
            let bad = try bucket.makeStorage {
                $0.logger = logger
                $0.credentials = .static(accessKeyId: bucket.server.accessKey, secretAccessKey: "bad-secret-0123456789")
            }
            let file = attachment("photo.jpg")
            try await good.uploadFile(data: Data("x".utf8), attachment: file)
            _ = try await good.downloadFile(attachment: file)
            try await good.deleteFile(attachment: file)
            await #expect(throws: AttachmentError.self) { _ = try await good.downloadFile(attachment: file) }
            await #expect(throws: AttachmentError.self) {
                try await bad.uploadFile(data: Data("x".utf8), attachment: file)
            }
            try await good.shutdown()
            try await bad.shutdown()
            let logged = lines.withLock { $0 }
            #expect(!logged.isEmpty)
            for line in logged {
                #expect(!line.contains(bucket.server.secretKey))
                #expect(!line.contains("bad-secret-0123456789"))
                #expect(!line.contains("Signature="))
                #expect(!line.lowercased().contains("authorization"))
            }
        }
    }

    @Test("a presigned GET URL fetched without credentials returns the bytes; a presigned PUT uploads")
    func presignedURLsWork() async throws {
        try await S3TestBucket.with("presign") { storage, _ in
            let content = testBytes(count: 4096)
            let file = attachment("shared photo.jpg")
            try await storage.uploadFile(data: content, attachment: file)
            let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup)
            do {
                let getURL = try await storage.presignedURL(for: file, method: .get, expiresIn: .seconds(300))
                let response = try await client.execute(
                    HTTPClientRequest(url: getURL.absoluteString), timeout: .seconds(30))
                #expect(response.status == .ok)
                let body = try await response.body.collect(upTo: 1 << 20)
                #expect(Data(body.readableBytesView) == content)

                let uploaded = attachment("uploaded elsewhere.bin")
                let putURL = try await storage.presignedURL(for: uploaded, method: .put)
                var put = HTTPClientRequest(url: putURL.absoluteString)
                put.method = .PUT
                put.body = .bytes(ByteBuffer(string: "from another device"))
                let putResponse = try await client.execute(put, timeout: .seconds(30))
                _ = try await putResponse.body.collect(upTo: 1 << 20)
                #expect(putResponse.status == .ok)
                #expect(try await storage.downloadFile(attachment: uploaded) == Data("from another device".utf8))
            } catch {
                try await client.shutdown()
                throw error
            }
            try await client.shutdown()
        }
    }

    @Test("a body that does not match its Content-MD5 or signed SHA-256 is rejected as integrityMismatch")
    func badDigestIsIntegrityMismatch() async throws {
        try await S3TestBucket.with("digest") { storage, _ in
            let body = Data("the real body".utf8)
            let other = PayloadDigests.of(Data("another body".utf8))
            let wrongMD5 = S3Request(
                method: .put, key: "tampered.bin", headers: [("content-md5", other.md5)], body: .data(body),
                payload: .hashing(body), operation: "PutObject")
            let wrongSHA256 = S3Request(
                method: .put, key: "tampered.bin", body: .data(body), payload: .sha256(other.sha256),
                operation: "PutObject")
            for request in [wrongMD5, wrongSHA256] {
                let error = await #expect(throws: AttachmentError.self) {
                    _ = try await storage.send(request, attachmentId: "a")
                }
                #expect(error?.code == .integrityMismatch, "\(String(describing: error))")
            }
            let keys = try await storage.listKeys()
            #expect(keys.isEmpty)
        }
    }

    @Test("a multipart upload interrupted after two parts resumes with only the missing parts")
    func interruptedMultipartUploadResumes() async throws {
        try await S3TestBucket.with("resume") { _, bucket in
            try await withTemporaryDirectory { directory in
                let content = testBytes(count: 16 * Self.mebibyte, seed: 7)  // parts of 5, 5, 5 and 1 MiB
                let source = directory.appendingPathComponent("big.bin")
                try content.write(to: source)
                let file = attachment("big.bin")
                let partsSent = LockedValue<[Int]>([])
                func configure(failingPart: Int?) -> (inout S3RemoteStorage.Configuration) -> Void {
                    { configuration in
                        configuration.multipartThreshold = Self.fiveMiB
                        configuration.partSize = Self.fiveMiB
                        configuration.partConcurrency = 1
                        configuration.requestObserver = { event in
                            guard let part = event.partNumber else { return }
                            if part == failingPart {
                                throw AttachmentError(code: .remoteUnavailable, message: "injected: network lost")
                            }
                            partsSent.withLock { $0.append(part) }
                        }
                    }
                }

                let first = try bucket.makeStorage(configure(failingPart: 3))
                let failure = await #expect(throws: AttachmentError.self) {
                    try await first.uploadFile(fileURL: source, attachment: file) { _ in }
                }
                try await first.shutdown()
                #expect(failure?.code == .remoteUnavailable)
                #expect(partsSent.withLock { $0 } == [1, 2])
                let saved = try FileManager.default.contentsOfDirectory(atPath: bucket.stateDirectory.path)
                #expect(saved.count == 1, "the upload's state is kept for resuming")

                partsSent.withLock { $0 = [] }
                let restarted = try bucket.makeStorage(configure(failingPart: nil))
                let progress = ProgressRecorder()
                try await restarted.uploadFile(fileURL: source, attachment: file, progress: progress.handler)
                #expect(partsSent.withLock { $0 } == [3, 4], "only the missing parts are sent again")
                #expect(progress.all.first?.completedBytes == Int64(10 * Self.mebibyte))
                #expect(progress.last?.completedBytes == Int64(content.count))
                #expect(try await restarted.downloadFile(attachment: file) == content)
                #expect(try await restarted.listMultipartUploadIds().isEmpty)
                #expect(try FileManager.default.contentsOfDirectory(atPath: bucket.stateDirectory.path).isEmpty)
                try await restarted.shutdown()
            }
        }
    }

    @Test("a multipart upload that fails for good is aborted and forgotten")
    func nonRetryableFailureAbortsMultipartUpload() async throws {
        try await S3TestBucket.with("abort") { _, bucket in
            try await withTemporaryDirectory { directory in
                let source = directory.appendingPathComponent("big.bin")
                try testBytes(count: 11 * Self.mebibyte).write(to: source)
                let storage = try bucket.makeStorage { configuration in
                    configuration.multipartThreshold = Self.fiveMiB
                    configuration.partSize = Self.fiveMiB
                    configuration.requestObserver = { event in
                        if event.partNumber == 2 {
                            throw AttachmentError(code: .remoteFailure, message: "injected: bad request")
                        }
                    }
                }
                let failure = await #expect(throws: AttachmentError.self) {
                    try await storage.uploadFile(fileURL: source, attachment: attachment("big.bin")) { _ in }
                }
                #expect(failure?.code == .remoteFailure)
                #expect(try await storage.listMultipartUploadIds().isEmpty)
                #expect(try FileManager.default.contentsOfDirectory(atPath: bucket.stateDirectory.path).isEmpty)
                try await storage.shutdown()
            }
        }
    }

    @Test("stale multipart uploads are aborted, with their saved state")
    func staleMultipartUploadsAreAborted() async throws {
        try await S3TestBucket.with("stale") { _, bucket in
            try await withTemporaryDirectory { directory in
                let source = directory.appendingPathComponent("big.bin")
                try testBytes(count: 6 * Self.mebibyte).write(to: source)
                let storage = try bucket.makeStorage { configuration in
                    configuration.keyPrefix = "app/"
                    configuration.multipartThreshold = Self.fiveMiB
                    configuration.partSize = Self.fiveMiB
                    configuration.requestObserver = { event in
                        if event.partNumber == 2 {
                            throw AttachmentError(code: .remoteUnavailable, message: "injected: offline")
                        }
                    }
                }
                await #expect(throws: AttachmentError.self) {
                    try await storage.uploadFile(fileURL: source, attachment: attachment("big.bin")) { _ in }
                }
                #expect(try await storage.listMultipartUploadIds().count == 1)
                #expect(try await storage.abortStaleMultipartUploads(olderThan: .seconds(3600)) == 0)
                #expect(try await storage.abortStaleMultipartUploads(olderThan: .zero) == 1)
                #expect(try await storage.listMultipartUploadIds().isEmpty)
                #expect(try FileManager.default.contentsOfDirectory(atPath: bucket.stateDirectory.path).isEmpty)
                try await storage.shutdown()
            }
        }
    }

    @Test("a server that cannot be reached is remoteUnavailable")
    func unreachableServerIsRemoteUnavailable() async throws {
        var configuration = S3RemoteStorage.Configuration(
            endpoint: URL(string: "http://127.0.0.1:9")!, bucket: "nowhere",
            credentials: .static(accessKeyId: "AKID", secretAccessKey: "secret-that-must-not-leak"))
        configuration.connectTimeout = .seconds(2)
        let storage = try S3RemoteStorage(configuration: configuration)
        let error = await #expect(throws: AttachmentError.self) {
            try await storage.uploadFile(data: Data("x".utf8), attachment: attachment("a.jpg"))
        }
        try await storage.shutdown()
        #expect(error?.code == .remoteUnavailable)
        #expect(!String(describing: error).contains("secret-that-must-not-leak"))
    }
}
