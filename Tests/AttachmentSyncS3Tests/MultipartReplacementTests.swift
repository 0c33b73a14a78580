import AsyncHTTPClient
import AttachmentSync
import Foundation
import NIOCore
import TestSupport
import Testing

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
