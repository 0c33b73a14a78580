import AttachmentSync
import Foundation
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// The "Shipping an app" article's code, compiled and run on the local Ceph gateway: every `swift` block of
/// the article must appear in this file (indentation aside).
@Suite("Shipping an app article")
struct ShippingAnAppArticleTests {
    static let articlePath = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources/AttachmentSync/Documentation.docc/ShippingAnApp.md")

    @Test("every code block of the article is in this file")
    func articleCodeIsHere() throws {
        #expect(try ArticleCode.blocks(ofArticleAt: Self.articlePath).count == 4)
        for block in try ArticleCode.blocksMissing(ofArticleAt: Self.articlePath, fromSourceAt: #filePath) {
            Issue.record("not compiled here:\n\(block)")
        }
    }

    @Test("the article's backend and device halves carry a photo from A to B; a refusal reaches the device")
    func articleCodeRuns() async throws {
        try await S3TestBucket.with("article") { admin, bucket in
            let backend = try AttachmentAuthorizer(
                s3Endpoint: bucket.server.endpoint, bucketName: bucket.name, accessKeyId: bucket.server.accessKey,
                secretAccessKey: bucket.server.secretKey, uploadAccessKeyId: bucket.server.uploadAccessKey,
                uploadSecretAccessKey: bucket.server.uploadSecretKey)
            let api = ArticleAPI(backend: backend, userId: "u1")
            let storageA = try Self.deviceStorage(api: api, bucket: bucket, name: "a")
            let storageB = try Self.deviceStorage(api: api, bucket: bucket, name: "b")
            try await withTemporaryDirectory { directory in
                let photo = testBytes(count: 50_000, seed: 4)
                let photoId = try await S3QueueDevice.with(
                    folder: directory.appendingPathComponent("a"), storage: storageA
                ) {
                    a in
                    try await a.queue.startSync()
                    let saved = try await a.queue.saveFile(data: photo, mediaType: "image/jpeg", fileExtension: "jpg") {
                        tx, attachment in
                        _ = try tx.execute(
                            sql: "INSERT INTO checklists (id, photo_id) VALUES ('c1', ?)", arguments: [attachment.id])
                    }
                    try await Self.uploadConnector(queue: a.queue, row: ["photo_id": saved.id])
                    return saved.id
                }
                #expect(try await admin.listKeys() == ["users/u1/\(photoId).jpg"])
                try await S3QueueDevice.with(folder: directory.appendingPathComponent("b"), storage: storageB) { b in
                    try await b.queue.startSync()
                    try await b.addChecklist("c1", photo: photoId)
                    try await b.waitForState(photoId, .synced)
                    #expect(b.bytesOnDisk("\(photoId).jpg") == photo)
                }
                // The backend refuses a filename outside the rules: the device sees accessDenied, with the reason.
                let refused = await #expect(throws: AttachmentError.self) {
                    try await storageA.deleteFile(
                        attachment: AttachmentSync.Attachment(id: "x", filename: "../x.jpg", state: .queuedDelete))
                }
                #expect(refused?.code == .accessDenied)
                #expect(refused?.message.contains("is not a filename a device may use") == true)
            }
            try await storageA.shutdown()
            try await storageB.shutdown()
        }
    }

    /// The article's device block.
    static func deviceStorage(api: ArticleAPI, bucket: S3TestBucket, name: String) throws -> PresignedRemoteStorage {
        let storage = try PresignedRemoteStorage(
            configuration: .init { operation in
                let (status, body) = try await api.post("/attachments/authorize", json: JSONEncoder().encode(operation))
                guard status == 200 else {
                    if status == 403 { throw PresignedRemoteStorage.Denied(String(decoding: body, as: UTF8.self)) }
                    throw RemoteHTTPError(statusCode: status)
                }
                return try JSONDecoder().decode(PresignedAuthorization.self, from: body)
            },
            transport: .urlSession())
        return storage
    }

    /// The article's upload-connector block.
    static func uploadConnector(queue: AttachmentQueue, row: [String: Any]) async throws {
        // In the upload connector, before sending a row that refers to a photo:
        if let photoId = row["photo_id"] as? String {
            _ = try await queue.waitUntilUploaded(attachmentId: photoId, timeout: .seconds(30))
        }
    }

    /// The article's conflict block (its behaviour is tested with the queue's conflict tests).
    func resolveConflicts(of queue: AttachmentQueue) async throws {
        for await event in queue.events {
            guard case .gaveUp(let id, let error, _) = event, error.code == .conflict else { continue }
            // Keep this device's version; `.remote` takes the other device's instead.
            _ = try await queue.resolveConflict(attachmentId: id, keeping: .local)
        }
    }
}

// The article's backend block.
/// Answers `POST /attachments/authorize` for a signed-in user: an operation in, an authorization out.
struct AttachmentAuthorizer: Sendable {
    let issuer: PresignedURLIssuer

    init(
        s3Endpoint: URL, bucketName: String, accessKeyId: String, secretAccessKey: String,
        uploadAccessKeyId: String, uploadSecretAccessKey: String
    ) throws {
        issuer = try PresignedURLIssuer(
            storage: S3RemoteStorage.Configuration(
                endpoint: s3Endpoint, region: "us-east-1", bucket: bucketName,
                credentials: .static(accessKeyId: accessKeyId, secretAccessKey: secretAccessKey)),
            maxObjectSize: 200 * 1024 * 1024,
            // Uploads are signed with a key that creates objects and reads none (on Ceph, a subuser with
            // `--access write`), so no upload URL can copy another object in.
            uploadCredentials: .static(accessKeyId: uploadAccessKeyId, secretAccessKey: uploadSecretAccessKey))
    }

    func respond(to body: Data, userId: String) async throws -> Data {
        let operation = try JSONDecoder().decode(PresignedOperation.self, from: body)
        let authorization = try await issuer.forUser(prefix: "users/\(userId)/").authorize(operation)
        return try JSONEncoder().encode(authorization)
    }
}

/// The app's API client, standing in for an HTTP round trip: JSON in, status and JSON out, refusals as 403
/// with the message.
struct ArticleAPI: Sendable {
    let backend: AttachmentAuthorizer
    let userId: String

    func post(_ path: String, json: Data) async throws -> (Int, Data) {
        guard path == "/attachments/authorize" else { return (404, Data()) }
        do {
            return (200, try await backend.respond(to: json, userId: userId))
        } catch let error as AttachmentError where error.code == .accessDenied || error.code == .invalidName {
            return (403, Data(error.message.utf8))
        }
    }
}
