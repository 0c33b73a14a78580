import AttachmentSync
import Crypto
import Foundation
import NIOHTTP1
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// The lowercase hex SHA-256 of `data`.
func hexSHA256(_ data: Data) -> String {
    SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
}

/// What the S3 adapter stores and checks so that no device takes wrong bytes for an attachment, and what it
/// cleans up, against the real Ceph S3 gateway.
@Suite("S3 integrity and resumes on Ceph")
struct S3IntegrityTests {
    static let fiveMiB: Int64 = 5 * 1024 * 1024

    /// An attachment whose record knows its content's SHA-256 (as the queue's records of saved files do).
    static func saved(_ filename: String, _ content: Data) -> AttachmentSync.Attachment {
        AttachmentSync.Attachment(
            id: UUID().uuidString, filename: filename, state: .queuedUpload, contentHash: hexSHA256(content))
    }

    @Test("every upload stores the content's SHA-256 with the object, single and multipart, and downloads return it")
    func uploadsStoreTheirHash() async throws {
        let configure: (inout S3RemoteStorage.Configuration) -> Void = {
            $0.multipartThreshold = Self.fiveMiB
            $0.partSize = Self.fiveMiB
        }
        try await S3TestBucket.with("hash", configure: configure) { storage, _ in
            try await withTemporaryDirectory { directory in
                for (name, size) in [("small.bin", 1000), ("multipart.bin", 11 * 1024 * 1024)] {
                    let content = testBytes(count: size, seed: UInt32(size % 251))
                    let source = directory.appendingPathComponent(name)
                    try content.write(to: source)
                    try await storage.uploadFile(fileURL: source, attachment: Self.saved(name, content)) { _ in }

                    // Another device, which knows nothing of the content but its name, learns its hash and size.
                    let destination = directory.appendingPathComponent("downloaded-\(name)")
                    let info = try await storage.downloadFile(
                        attachment: attachment(name), into: destination, from: 0, progress: { _ in })
                    #expect(info.sha256 == hexSHA256(content), "\(name)")
                    #expect(info.size == Int64(size), "\(name)")
                    #expect(try Data(contentsOf: destination) == content)
                }
                // The Data form stores the hash of the bytes it sends.
                let data = Data("from memory".utf8)
                try await storage.uploadFile(data: data, attachment: attachment("memory.txt"))
                let info = try await storage.downloadFile(
                    attachment: attachment("memory.txt"), into: directory.appendingPathComponent("memory"), from: 0,
                    progress: { _ in })
                #expect(info.sha256 == hexSHA256(data))
            }
        }
    }

    @Test("content that is not what the attachment was saved as is never uploaded")
    func changedLocalContentIsRefused() async throws {
        try await S3TestBucket.with("refuse") { storage, _ in
            try await withTemporaryDirectory { directory in
                let saved = Self.saved("photo.jpg", Data("the photo as saved".utf8))
                let source = directory.appendingPathComponent("photo.jpg")
                try Data("bytes that changed on disk".utf8).write(to: source)
                let fromFile = await #expect(throws: AttachmentError.self) {
                    try await storage.uploadFile(fileURL: source, attachment: saved) { _ in }
                }
                #expect(fromFile?.code == .integrityMismatch)
                let fromData = await #expect(throws: AttachmentError.self) {
                    try await storage.uploadFile(data: Data("other".utf8), attachment: saved)
                }
                #expect(fromData?.code == .integrityMismatch)
                #expect(try await storage.listKeys().isEmpty)
            }
        }
    }

    /// Ceph (16) checks both the `Content-MD5` and the signed `x-amz-content-sha256` of what the adapter
    /// hashed (not `x-amz-checksum-sha256`): with `sendsContentMD5` off, the signed SHA-256 alone must still
    /// stop other bytes from being stored.
    @Test(
        "bytes that change between the digest and the send are refused, single and multipart, with and without MD5",
        arguments: [false, true], [true, false])
    func bytesChangedAfterTheDigestAreRefused(multipart: Bool, contentMD5: Bool) async throws {
        try await withTemporaryDirectory { directory in
            let size = multipart ? Int(Self.fiveMiB) + 300_000 : 200_000
            let original = Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7) })
            var changed = original
            changed[size / 2] ^= 0xFF  // the same size, one byte different, in the first part
            changed[size - 1] ^= 0xFF
            let source = directory.appendingPathComponent("photo.jpg")
            let other = directory.appendingPathComponent("changed.jpg")
            try original.write(to: source)
            try changed.write(to: other)
            // The first open is the digest pass (of the whole file, or of the first part); every later one
            // reads the changed bytes.
            let disk = SwappingDisk(path: source.path, replacement: other.path, swapAt: 2)
            try await S3TestBucket.with(
                "swapped",
                configure: {
                    $0.files = disk
                    $0.sendsContentMD5 = contentMD5
                    $0.multipartThreshold = Self.fiveMiB
                    $0.partSize = Self.fiveMiB
                    $0.partConcurrency = 1
                }
            ) { storage, _ in
                let saved = Self.saved("photo.jpg", original)
                let error = await #expect(throws: AttachmentError.self) {
                    try await storage.uploadFile(fileURL: source, attachment: saved) { _ in }
                }
                #expect(error?.code == .integrityMismatch)
                #expect(disk.opens.withLock { $0 } >= 2)
                let keys = try await storage.listKeys()
                #expect(keys.isEmpty)
            }
        }
    }

    /// Passes every request on to a real signer and keeps the names of the headers each one was sent with.
    final class RecordingAuthorizer: S3RequestAuthorizer {
        let base: SigV4RequestAuthorizer
        /// Each authorised request's operation and lowercase header names.
        let sent = LockedValue<[(operation: String, headers: Set<String>)]>([])

        init(base: SigV4RequestAuthorizer) { self.base = base }

        var renewsRefusedRequests: Bool { base.renewsRefusedRequests }
        var splitsDownloads: Bool { base.splitsDownloads }

        func authorize(_ request: S3Request, renewing: Bool) async throws -> AuthorizedS3Request {
            let authorized = try await base.authorize(request, renewing: renewing)
            sent.withLock { $0.append((request.operation, Set(authorized.headers.map { $0.name.lowercased() }))) }
            return authorized
        }

        func refused(_ request: S3Request, retrying: Bool) async { await base.refused(request, retrying: retrying) }

        func prepare(_ request: S3Request, lifetime: Duration) async throws -> AuthorizedS3Request {
            try await base.prepare(request, lifetime: lifetime)
        }

        func presignedURL(
            key: String, method: S3RemoteStorage.PresignedMethod, expiresIn: Duration, attachmentId: String?
        ) async throws -> URL {
            try await base.presignedURL(key: key, method: method, expiresIn: expiresIn, attachmentId: attachmentId)
        }
    }

    @Test(
        "Content-MD5 goes with every upload request by default and with none when turned off; the objects are the same",
        arguments: [true, false])
    func contentMD5CanBeLeftOut(sends: Bool) async throws {
        try await S3TestBucket.with("md5-\(sends)") { _, bucket in
            let configuration = bucket.configuration {
                $0.multipartThreshold = Self.fiveMiB
                $0.partSize = Self.fiveMiB
                $0.sendsContentMD5 = sends
            }
            let recorder = RecordingAuthorizer(base: SigV4RequestAuthorizer(configuration: configuration))
            let storage = try S3RemoteStorage(
                configuration: configuration,
                engine: {
                    TestTransport.asyncHTTPClient.transport.makeEngine(
                        configuration.connectTimeout, configuration.requestTimeout)
                }, authorizer: recorder)
            do {
                try await withTemporaryDirectory { directory in
                    var stored: [String: Data] = [:]
                    for (name, size) in [("small.bin", 1000), ("multipart.bin", 11 * 1024 * 1024)] {
                        let content = testBytes(count: size, seed: UInt32(size % 251))
                        let source = directory.appendingPathComponent(name)
                        try content.write(to: source)
                        try await storage.uploadFile(fileURL: source, attachment: Self.saved(name, content)) { _ in }
                        stored[name] = content
                    }
                    let data = Data("from memory".utf8)
                    try await storage.uploadFile(data: data, attachment: Self.saved("memory.txt", data))
                    stored["memory.txt"] = data
                    for (name, content) in stored {
                        let destination = directory.appendingPathComponent("downloaded-\(name)")
                        let info = try await storage.downloadFile(
                            attachment: attachment(name), into: destination, from: 0, progress: { _ in })
                        #expect(try Data(contentsOf: destination) == content, "\(name)")
                        #expect(info.sha256 == hexSHA256(content), "\(name)")
                    }
                }
                let uploads = recorder.sent.withLock { $0 }.filter {
                    ["PutObject", "UploadPart"].contains($0.operation)
                }
                // Two single uploads and three parts.
                #expect(uploads.count == 5)
                for upload in uploads {
                    #expect(upload.headers.contains("content-md5") == sends, "\(upload.operation)")
                    #expect(upload.headers.contains("x-amz-content-sha256"), "\(upload.operation): the body is signed")
                }
                try await storage.shutdown()
            } catch {
                try? await storage.shutdown()
                throw error
            }
        }
    }

    /// Downloads `file` into `destination` completely, then cuts it to `count` bytes and keeps beside it what
    /// identified the object then: the state a download interrupted after `count` bytes leaves.
    static func partialDownload(
        _ storage: S3RemoteStorage, _ file: AttachmentSync.Attachment, into destination: URL, keeping count: Int64
    ) async throws {
        _ = try await storage.downloadFile(attachment: file, into: destination, from: 0, progress: { _ in })
        let head = try await storage.send(
            S3Request(method: .head, key: file.filename, operation: "HeadObject"), attachmentId: nil)
        let size = head.headers.first(name: "content-length").flatMap { Int64($0) }
        let validator = try #require(ResumeValidator(headers: head.headers, size: size))
        validator.save(to: HTTPTransport.resumeValidatorURL(for: destination), files: SystemFileOperations())
        let handle = try FileHandle(forWritingTo: destination)
        try handle.truncate(atOffset: UInt64(count))
        try handle.close()
    }

    @Test("a resume of an unchanged object fetches only the rest; of a replaced one, the new object whole")
    func resumesAreConditional() async throws {
        let requests = LockedValue<[String]>([])
        let configure: (inout S3RemoteStorage.Configuration) -> Void = { configuration in
            configuration.requestObserver = { event in requests.withLock { $0.append(event.operation) } }
        }
        try await S3TestBucket.with("resume-check", configure: configure) { storage, _ in
            try await withTemporaryDirectory { directory in
                let first = testBytes(count: 3 * 1024 * 1024, seed: 1)
                let second = testBytes(count: 3 * 1024 * 1024, seed: 2)
                let file = attachment("video.mp4")
                try await storage.uploadFile(data: first, attachment: file)
                let destination = directory.appendingPathComponent("partial")

                // Unchanged: one ranged GET on condition of the ETag, progress from the bytes held.
                try await Self.partialDownload(storage, file, into: destination, keeping: 1_000_000)
                requests.withLock { $0 = [] }
                let progress = ProgressRecorder()
                let info = try await storage.downloadFile(
                    attachment: file, into: destination, from: 1_000_000, progress: progress.handler)
                #expect(try Data(contentsOf: destination) == first)
                #expect(requests.withLock { $0 } == ["GetObject"])
                #expect(progress.all.first?.completedBytes == 1_000_000)
                #expect(info.size == Int64(first.count))
                #expect(info.sha256 == hexSHA256(first))

                // Replaced by another device meanwhile: Ceph refuses the condition (412), the new object comes
                // whole, never half of each.
                try await Self.partialDownload(storage, file, into: destination, keeping: 1_000_000)
                // Another device replaced it (uploads are create-only: it deleted the object first).
                try await storage.deleteFile(attachment: file)
                try await storage.uploadFile(data: second, attachment: file)
                requests.withLock { $0 = [] }
                let replaced = try await storage.downloadFile(
                    attachment: file, into: destination, from: 1_000_000, progress: { _ in })
                #expect(try Data(contentsOf: destination) == second)
                #expect(requests.withLock { $0 } == ["GetObject", "GetObject"])
                #expect(replaced.sha256 == hexSHA256(second))

                // Every byte already held: Ceph answers 416, and a HEAD confirms the object is exactly those bytes.
                try await Self.partialDownload(storage, file, into: destination, keeping: Int64(second.count))
                requests.withLock { $0 = [] }
                let complete = try await storage.downloadFile(
                    attachment: file, into: destination, from: Int64(second.count), progress: { _ in })
                #expect(requests.withLock { $0 } == ["GetObject", "HeadObject"])
                #expect(complete.size == Int64(second.count))
                #expect(complete.sha256 == hexSHA256(second))
                #expect(try Data(contentsOf: destination) == second)
            }
        }
    }

    @Test("an upload that will never resume is aborted with its saved state")
    func discardedUploadIsAborted() async throws {
        try await S3TestBucket.with("discard") { _, bucket in
            try await withTemporaryDirectory { directory in
                let content = testBytes(count: 12 * 1024 * 1024, seed: 3)
                let source = directory.appendingPathComponent("big.bin")
                try content.write(to: source)
                let file = Self.saved("big.bin", content)
                let configure: (inout S3RemoteStorage.Configuration) -> Void = { configuration in
                    configuration.multipartThreshold = Self.fiveMiB
                    configuration.partSize = Self.fiveMiB
                    configuration.partConcurrency = 1
                    configuration.requestObserver = { event in
                        if event.partNumber == 2 {
                            throw AttachmentError(code: .remoteUnavailable, message: "injected: network lost")
                        }
                    }
                }
                try await bucket.withStorage(configure) { storage in
                    await #expect(throws: AttachmentError.self) {
                        try await storage.uploadFile(fileURL: source, attachment: file) { _ in }
                    }
                    #expect(try await storage.listMultipartUploadIds().count == 1, "kept for resuming")

                    // The attachment is deleted before its upload could resume.
                    try await storage.discardPartialUpload(attachment: file)
                    #expect(try await storage.listMultipartUploadIds().isEmpty)
                    #expect(try FileManager.default.contentsOfDirectory(atPath: bucket.stateDirectory.path).isEmpty)
                    try await storage.discardPartialUpload(attachment: file)  // nothing left: succeeds
                }
            }
        }
    }

    @Test("a delete refused for stale credentials fetches new ones for the next try")
    func refusedDeleteRefreshesCredentials() async throws {
        try await S3TestBucket.with("delete-refresh") { storage, bucket in
            let file = attachment("photo.jpg")
            try await storage.uploadFile(data: Data("x".utf8), attachment: file)
            let calls = LockedValue(0)
            try await bucket.withStorage({ $0.credentials = bucket.credentialsRevokedOnce(counting: calls) }) {
                deleting in
                let refused = await #expect(throws: AttachmentError.self) {
                    try await deleting.deleteFile(attachment: file)
                }
                #expect(refused?.code == .accessDenied)
                try await deleting.deleteFile(attachment: file)
                #expect(calls.withLock { $0 } == 2)
                #expect(try await storage.listKeys().isEmpty)
            }
        }
    }
}
