import AsyncHTTPClient
import AttachmentSync
import Foundation
import NIOCore
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// No multipart upload, fresh or resumed, with credentials or through presigned URLs, replaces an object it did
/// not create, on the local Ceph gateway (which ignores `If-None-Match` on CompleteMultipartUpload).
@Suite("Multipart uploads never replace other content on Ceph")
struct MultipartReplacementTests {
    static let mebibyte = 1024 * 1024
    static let fiveMiB = Int64(5 * mebibyte)

    static func attachment(_ name: String, _ content: Data) -> AttachmentSync.Attachment {
        AttachmentSync.Attachment(
            id: name, filename: name, state: .queuedUpload, mediaType: "video/mp4", size: Int64(content.count),
            contentHash: FileStreaming.sha256(content))
    }

    /// 5 MiB parts, one at a time, failing part `failingPart` (a network loss) and recording operations.
    static func configure(
        failingPart: Int?, operations: LockedValue<[String]>, state: URL
    ) -> (inout S3RemoteStorage.Configuration) -> Void {
        { configuration in
            configuration.multipartThreshold = fiveMiB
            configuration.partSize = fiveMiB
            configuration.partConcurrency = 1
            configuration.stateDirectory = state
            configuration.requestObserver = { event in
                if let failingPart, event.partNumber == failingPart {
                    throw AttachmentError(code: .remoteUnavailable, message: "injected: network lost")
                }
                operations.withLock { $0.append(event.operation) }
            }
        }
    }

    @Test("device A's resumed multipart upload does not replace what device B uploaded meanwhile: a conflict")
    func resumedUploadDoesNotReplaceAnotherDevicesObject() async throws {
        try await S3TestBucket.with("mp-ab") { admin, bucket in
            try await withTemporaryDirectory { directory in
                let content = testBytes(count: 16 * Self.mebibyte, seed: 11)
                let source = directory.appendingPathComponent("clip.mp4")
                try content.write(to: source)
                let file = Self.attachment("clip.mp4", content)
                let operations = LockedValue<[String]>([])
                let stateA = directory.appendingPathComponent("state-a")
                // Given device A's upload, interrupted at its third part
                let interrupted = try bucket.makeStorage(
                    Self.configure(failingPart: 3, operations: operations, state: stateA))
                await #expect(throws: AttachmentError.self) {
                    try await interrupted.uploadFile(fileURL: source, attachment: file) { _ in }
                }
                try await interrupted.shutdown()
                // And device B's upload of other content under the same name
                let other = Data("device B's clip".utf8)
                let deviceB = try bucket.makeStorage { $0.stateDirectory = directory.appendingPathComponent("state-b") }
                try await deviceB.uploadFile(data: other, attachment: Self.attachment("clip.mp4", other))
                try await deviceB.shutdown()
                // When A resumes
                let resumed = try bucket.makeStorage(
                    Self.configure(failingPart: nil, operations: operations, state: stateA))
                let conflict = await #expect(throws: AttachmentError.self) {
                    try await resumed.uploadFile(fileURL: source, attachment: file) { _ in }
                }
                try await resumed.shutdown()
                // Then it is a conflict; B's object is there, A's upload is aborted and forgotten
                #expect(conflict?.code == .conflict)
                #expect(try await admin.downloadFile(attachment: file) == other)
                #expect(try await admin.listMultipartUploadIds().isEmpty)
                #expect(try FileManager.default.contentsOfDirectory(atPath: stateA.path).isEmpty)
            }
        }
    }

    @Test("a resumed multipart upload whose content is already there succeeds without completing, and is aborted")
    func resumedUploadOfContentAlreadyThereSucceeds() async throws {
        try await S3TestBucket.with("mp-same") { admin, bucket in
            try await withTemporaryDirectory { directory in
                let content = testBytes(count: 11 * Self.mebibyte, seed: 12)
                let source = directory.appendingPathComponent("clip.mp4")
                try content.write(to: source)
                let file = Self.attachment("clip.mp4", content)
                let operations = LockedValue<[String]>([])
                let stateA = directory.appendingPathComponent("state-a")
                let interrupted = try bucket.makeStorage(
                    Self.configure(failingPart: 2, operations: operations, state: stateA))
                await #expect(throws: AttachmentError.self) {
                    try await interrupted.uploadFile(fileURL: source, attachment: file) { _ in }
                }
                try await interrupted.shutdown()
                // Another device (or this one, whose answer was lost) stored the same content meanwhile
                let deviceB = try bucket.makeStorage { $0.stateDirectory = directory.appendingPathComponent("state-b") }
                try await deviceB.uploadFile(fileURL: source, attachment: file) { _ in }
                try await deviceB.shutdown()
                let objectBefore = try #require(try await admin.fileInfo(attachment: file))
                operations.withLock { $0 = [] }
                let resumed = try bucket.makeStorage(
                    Self.configure(failingPart: nil, operations: operations, state: stateA))
                try await resumed.uploadFile(fileURL: source, attachment: file) { _ in }
                try await resumed.shutdown()
                #expect(!operations.withLock { $0 }.contains("CompleteMultipartUpload"), "nothing was replaced")
                #expect(!operations.withLock { $0 }.contains("UploadPart"))
                #expect(try await admin.fileInfo(attachment: file) == objectBefore)
                #expect(try await admin.listMultipartUploadIds().isEmpty)
                #expect(try FileManager.default.contentsOfDirectory(atPath: stateA.path).isEmpty)
            }
        }
    }

    @Test("a presigned device's resumed multipart upload does not replace what another device uploaded meanwhile")
    func presignedResumedUploadDoesNotReplace() async throws {
        try await S3TestBucket.with("mp-presigned") { admin, bucket in
            let issuer = try PresignedRemoteStorageTests.issuer(bucket)
            try await withTemporaryDirectory { directory in
                let content = testBytes(count: 16 * Self.mebibyte, seed: 13)
                let source = directory.appendingPathComponent("clip.mp4")
                try content.write(to: source)
                let file = Self.attachment("clip.mp4", content)
                let first = try PresignedRemoteStorageTests.device(
                    bucket,
                    configure: {
                        $0.partConcurrency = 1
                        $0.requestObserver = { event in
                            if event.partNumber == 3 {
                                throw AttachmentError(code: .remoteUnavailable, message: "injected: network lost")
                            }
                        }
                    }
                ) { try await issuer.authorize($0) }
                await #expect(throws: AttachmentError.self) {
                    try await first.uploadFile(fileURL: source, attachment: file) { _ in }
                }
                try await first.shutdown()
                // Another device of alice's stores other content under the name
                let other = Data("the other device's clip".utf8)
                let otherDevice = try PresignedRemoteStorageTests.device(
                    bucket, configure: { $0.stateDirectory = directory.appendingPathComponent("other") }
                ) { try await issuer.authorize($0) }
                try await otherDevice.uploadFile(data: other, attachment: Self.attachment("clip.mp4", other))
                try await otherDevice.shutdown()
                // The first device resumes: a conflict, and the other content stays
                let resumed = try PresignedRemoteStorageTests.device(bucket) { try await issuer.authorize($0) }
                let conflict = await #expect(throws: AttachmentError.self) {
                    try await resumed.uploadFile(fileURL: source, attachment: file) { _ in }
                }
                try await resumed.shutdown()
                #expect(conflict?.code == .conflict)
                let backend = try PresignedRemoteStorageTests.backendView(bucket)
                #expect(try await backend.downloadFile(attachment: file) == other)
                try await backend.shutdown()
                #expect(try await admin.listMultipartUploadIds().isEmpty)
            }
        }
    }

    @Test("the issuer authorises no multipart create or complete over an existing object, whatever a device does")
    func issuerRefusesCreateAndCompleteOverAnObject() async throws {
        try await S3TestBucket.with("mp-issuer") { admin, bucket in
            let issuer = try PresignedRemoteStorageTests.issuer(bucket)
            let backend = try PresignedRemoteStorageTests.backendView(bucket)
            let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup)
            let device = PresignedConfinementTests.HostileDevice(issuer: issuer, client: client, bucket: bucket.name)
            do {
                let existing = Data("alice's photo".utf8)
                try await backend.uploadFile(data: existing, attachment: Self.attachment("a.jpg", existing))
                // An object is there: no create
                var create = PresignedOperation(kind: .createMultipartUpload, filename: "a.jpg")
                create.objectSize = 4
                #expect(try await device.authorize(create) == nil, "create refused over an existing object")

                // An upload started before the object appeared: no complete once it is there
                create.filename = "b.jpg"
                let created = try #require(try await device.authorize(create))
                let reply = try await device.send(.POST, created)
                let uploadId = try #require(S3XML.parse(reply.body)?.value("UploadId"))
                var part = PresignedOperation(kind: .uploadPart, filename: "b.jpg")
                part.uploadId = uploadId
                part.partNumber = 1
                part.contentLength = 4
                let sent = try await device.send(
                    .PUT, try #require(try await device.authorize(part)), body: Data("evil".utf8))
                let etag = try #require(sent.headers.first(name: "etag"))
                try await backend.uploadFile(data: existing, attachment: Self.attachment("b.jpg", existing))
                var complete = PresignedOperation(kind: .completeMultipartUpload, filename: "b.jpg")
                complete.uploadId = uploadId
                let replacing = try await device.authorize(complete)
                #expect(replacing == nil, "complete refused over an existing object")
                if let replacing {
                    let xml =
                        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\(S3XML.escape(etag))</ETag>"
                        + "</Part></CompleteMultipartUpload>"
                    _ = try await device.send(.POST, replacing, body: Data(xml.utf8))
                }
                #expect(try await backend.downloadFile(attachment: Self.attachment("b.jpg", existing)) == existing)

                // A complete authorised while the name was free is short-lived and create-only where the server
                // honours it.
                create.filename = "c.jpg"
                let third = try #require(try await device.authorize(create))
                let thirdId = try #require(S3XML.parse(try await device.send(.POST, third).body)?.value("UploadId"))
                complete.filename = "c.jpg"
                complete.uploadId = thirdId
                let completion = try #require(try await device.authorize(complete))
                #expect(completion.headers["if-none-match"] == "*")
                #expect(completion.expiresAt.timeIntervalSinceNow <= 61)
            } catch {
                try? await client.shutdown()
                try? await backend.shutdown()
                throw error
            }
            try await client.shutdown()
            try await backend.shutdown()
            _ = admin
        }
    }
}

/// The window no check closes on Ceph: an object stored after the last look and before the completion is
/// replaced by it. With versioning on, the replaced object stays as a noncurrent version.
@Suite("The window left by Ceph's unconditional CompleteMultipartUpload")
struct MultipartReplacementWindowTests {
    /// Sends `body` with `curl` to a presigned PUT URL, blocking the calling thread until it is stored: what
    /// another device does at that instant (a request observer cannot wait for async work).
    static func putBlocking(_ body: Data, to url: URL, directory: URL) throws {
        let file = directory.appendingPathComponent("other-device-\(UUID().uuidString)")
        try body.write(to: file)
        let curl = try ChildProcess(
            "/usr/bin/curl", ["-sSf", "-m", "30", "-X", "PUT", "--data-binary", "@\(file.path)", url.absoluteString],
            standardOutput: .capture(), standardError: .capture())
        // curl gives up after 30 s (-m 30): the deadline only turns a hang of the wait itself into a failure.
        let termination = try curl.waitBlocking(seconds: 60)
        try #require(
            termination == .exited(0),
            "curl PUT \(termination): \(curl.capturedError)\(curl.capturedOutput)")
    }

    @Test("an object stored between the last HEAD and the completion is replaced; versioning keeps it")
    func objectStoredInTheWindowIsAVersion() async throws {
        try await S3TestBucket.with("mp-window") { admin, bucket in
            try await withTemporaryDirectory { directory in
                try await admin.setVersioning(enabled: true)
                let content = testBytes(count: 11 * MultipartReplacementTests.mebibyte, seed: 14)
                let source = directory.appendingPathComponent("clip.mp4")
                try content.write(to: source)
                let file = MultipartReplacementTests.attachment("clip.mp4", content)
                let other = Data("stored in the window".utf8)
                let otherURL = try await admin.presignedURL(for: file, method: .put, expiresIn: .seconds(600))
                let storage = try bucket.makeStorage { configuration in
                    configuration.multipartThreshold = MultipartReplacementTests.fiveMiB
                    configuration.partSize = MultipartReplacementTests.fiveMiB
                    configuration.requestObserver = { event in
                        // Another device stores the name after the last look, as the completion leaves.
                        if event.operation == "CompleteMultipartUpload" {
                            try Self.putBlocking(other, to: otherURL, directory: directory)
                        }
                    }
                }
                try await storage.uploadFile(fileURL: source, attachment: file) { _ in }
                try await storage.shutdown()
                // The completion replaced it (Ceph ignores If-None-Match there) and the check after it saw
                // this upload's own content...
                #expect(try await admin.downloadFile(attachment: file) == content)
                // ...and the other device's object is the noncurrent version, to restore from.
                let versions = try await admin.listVersions(key: "clip.mp4")
                #expect(versions.count == 2)
                let older = try #require(versions.first { !$0.isLatest })
                #expect(try await admin.downloadVersion(key: "clip.mp4", versionId: older.versionId) == other)
                try await admin.deleteAllVersions()
            }
        }
    }
}

extension MultipartReplacementWindowTests {
    @Test("an object that replaces the completed upload before the check after it is a conflict, not a success")
    func replacedRightAfterCompletingIsAConflict() async throws {
        try await S3TestBucket.with("mp-after") { admin, bucket in
            try await withTemporaryDirectory { directory in
                let content = testBytes(count: 11 * MultipartReplacementTests.mebibyte, seed: 15)
                let source = directory.appendingPathComponent("clip.mp4")
                try content.write(to: source)
                let file = MultipartReplacementTests.attachment("clip.mp4", content)
                let other = Data("stored right after the completion".utf8)
                let otherURL = try await admin.presignedURL(for: file, method: .put, expiresIn: .seconds(600))
                let completed = LockedValue(false)
                let storage = try bucket.makeStorage { configuration in
                    configuration.multipartThreshold = MultipartReplacementTests.fiveMiB
                    configuration.partSize = MultipartReplacementTests.fiveMiB
                    configuration.requestObserver = { event in
                        if event.operation == "CompleteMultipartUpload" {
                            completed.withLock { $0 = true }
                        } else if event.operation == "HeadObject", completed.withLock({ $0 }) {
                            try MultipartReplacementWindowTests.putBlocking(other, to: otherURL, directory: directory)
                        }
                    }
                }
                let conflict = await #expect(throws: AttachmentError.self) {
                    try await storage.uploadFile(fileURL: source, attachment: file) { _ in }
                }
                try await storage.shutdown()
                #expect(conflict?.code == .conflict)
                #expect(try await admin.downloadFile(attachment: file) == other)
            }
        }
    }
}

extension MultipartReplacementWindowTests {
    @Test("through the queue, a resumed multipart upload that meets another device's object ends as a conflict")
    func queueGivesUpAResumedUploadAsAConflictAndResolvesIt() async throws {
        try await S3TestBucket.with("mp-queue") { admin, bucket in
            try await withTemporaryDirectory { directory in
                let content = testBytes(count: 16 * MultipartReplacementTests.mebibyte, seed: 16)
                let other = Data("device B's photo".utf8)
                let record = AttachmentSync.Attachment(id: "clip", filename: "clip.jpg", state: .synced)
                let otherURL = try await admin.presignedURL(for: record, method: .put, expiresIn: .seconds(600))
                let interrupted = LockedValue(false)
                // Device A's third part fails once, as the network drops, just after device B stored the name.
                let storage = try bucket.makeStorage { configuration in
                    configuration.multipartThreshold = MultipartReplacementTests.fiveMiB
                    configuration.partSize = MultipartReplacementTests.fiveMiB
                    configuration.partConcurrency = 1
                    configuration.stateDirectory = directory.appendingPathComponent("state")
                    configuration.requestObserver = { event in
                        guard event.partNumber == 3, !interrupted.withLock({ $0 }) else { return }
                        interrupted.withLock { $0 = true }
                        try MultipartReplacementWindowTests.putBlocking(other, to: otherURL, directory: directory)
                        throw AttachmentError(code: .remoteUnavailable, message: "injected: network lost")
                    }
                }
                try await S3QueueDevice.with(folder: directory.appendingPathComponent("a"), storage: storage) { a in
                    let events = a.queue.events
                    _ = try await a.queue.saveFile(
                        data: content, mediaType: "image/jpeg", fileExtension: "jpg", id: "clip")
                    try await a.queue.startSync()
                    let error = try await withDeadline(seconds: 60, "the upload to be given up") {
                        () -> AttachmentError in
                        for await event in events {
                            if case .gaveUp(let id, let error, _) = event, id == "clip" { return error }
                        }
                        throw StreamEnded(what: "events")
                    }
                    // Given up as a conflict, both copies kept, no upload left in the bucket
                    #expect(error.code == .conflict)
                    #expect(a.bytesOnDisk("clip.jpg") == content)
                    #expect(try await admin.downloadFile(attachment: record) == other)
                    #expect(try await admin.listMultipartUploadIds().isEmpty)
                    // Keeping this device's content replaces the other one, on purpose
                    _ = try await a.queue.resolveConflict(attachmentId: "clip", keeping: .local)
                    try await a.waitForState("clip", .synced)
                    #expect(try await admin.downloadFile(attachment: record) == content)
                }
                try await storage.shutdown()
            }
        }
    }
}

extension S3RemoteStorage {
    /// Turns the bucket's versioning on or suspends it.
    func setVersioning(enabled: Bool) async throws {
        let body = Data(
            ("<VersioningConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Status>"
                + (enabled ? "Enabled" : "Suspended") + "</Status></VersioningConfiguration>").utf8)
        let request = S3Request(
            method: .put, key: nil, query: [("versioning", "")], body: .data(body), payload: .hashing(body),
            operation: "PutBucketVersioning")
        let response = try await send(request, attachmentId: nil)
        _ = try await transport.collect(response, event: request.event, attachmentId: nil, upTo: 1 << 20)
    }

    /// The versions of `key`, newest first.
    func listVersions(key: String) async throws -> [(versionId: String, isLatest: Bool)] {
        let request = S3Request(
            method: .get, key: nil, query: [("prefix", key), ("versions", "")], operation: "ListObjectVersions")
        let response = try await send(request, attachmentId: nil)
        let body = try await transport.collect(response, event: request.event, attachmentId: nil, upTo: 1 << 20)
        return try #require(S3XML.parse(body)).children("Version").compactMap { version in
            guard version.value("Key") == key, let id = version.value("VersionId") else { return nil }
            return (id, version.value("IsLatest") == "true")
        }
    }

    /// Deletes every version and delete marker in the bucket (a versioned bucket is deleted empty of them).
    func deleteAllVersions() async throws {
        let request = S3Request(method: .get, key: nil, query: [("versions", "")], operation: "ListObjectVersions")
        let response = try await send(request, attachmentId: nil)
        let body = try await transport.collect(response, event: request.event, attachmentId: nil, upTo: 1 << 20)
        let root = try #require(S3XML.parse(body))
        for entry in root.children("Version") + root.children("DeleteMarker") {
            guard let key = entry.value("Key"), let id = entry.value("VersionId") else { continue }
            let delete = S3Request(method: .delete, key: key, query: [("versionId", id)], operation: "DeleteObject")
            let reply = try await send(delete, attachmentId: nil)
            _ = try await transport.collect(reply, event: delete.event, attachmentId: nil, upTo: 1 << 20)
        }
    }

    /// One version's bytes.
    func downloadVersion(key: String, versionId: String) async throws -> Data {
        let request = S3Request(method: .get, key: key, query: [("versionId", versionId)], operation: "GetObject")
        let response = try await send(request, attachmentId: nil)
        return try await transport.collect(response, event: request.event, attachmentId: nil, upTo: 1 << 20)
    }
}
