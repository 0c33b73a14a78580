import AsyncHTTPClient
import AttachmentSync
import Foundation
import Logging
import NIOCore
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// The local servers the integration tests use, and the failure they report when one is not running.
enum TestServers {
    /// The S3 endpoint: `ATTACHMENT_SYNC_S3_ENDPOINT` etc., falling back to `scripts/s3-server`'s fixed values.
    struct S3 {
        var endpoint: URL
        var accessKey: String
        var secretKey: String
        var region: String
        /// A write-only key of the same account (`scripts/s3-server`'s subuser `attachment-sync-test:uploads`):
        /// it creates objects and cannot read any, what a `PresignedURLIssuer` signs uploads with on Ceph.
        var uploadAccessKey: String
        var uploadSecretKey: String
    }

    static var s3: S3 {
        let environment = ProcessInfo.processInfo.environment
        return S3(
            endpoint: URL(string: environment["ATTACHMENT_SYNC_S3_ENDPOINT"] ?? "http://127.0.0.1:7480")!,
            accessKey: environment["ATTACHMENT_SYNC_S3_ACCESS_KEY"] ?? "ATTACHMENTSYNCTEST0001",
            secretKey: environment["ATTACHMENT_SYNC_S3_SECRET_KEY"] ?? "attachment-sync-test-secret-0000000000001",
            region: environment["ATTACHMENT_SYNC_S3_REGION"] ?? "us-east-1",
            uploadAccessKey: environment["ATTACHMENT_SYNC_S3_UPLOAD_ACCESS_KEY"] ?? "ATTACHMENTSYNCUPLOAD01",
            uploadSecretKey: environment["ATTACHMENT_SYNC_S3_UPLOAD_SECRET_KEY"]
                ?? "attachment-sync-upload-secret-000000000001")
    }

    /// The WebDAV server's base URL: `ATTACHMENT_SYNC_WEBDAV_URL`, falling back to `scripts/webdav-server`'s.
    static var webdav: URL {
        URL(string: ProcessInfo.processInfo.environment["ATTACHMENT_SYNC_WEBDAV_URL"] ?? "http://127.0.0.1:8089")!
    }

    /// The bearer token `/auth/` on the WebDAV server accepts: `ATTACHMENT_SYNC_WEBDAV_TOKEN`, falling back to
    /// `scripts/webdav-server`'s.
    static var webdavToken: String {
        ProcessInfo.processInfo.environment["ATTACHMENT_SYNC_WEBDAV_TOKEN"] ?? "attachment-sync-test-token"
    }

    /// Fails the test, with the command to run, unless something answers HTTP at `url`.
    static func requireReachable(_ url: URL, startCommand: String) async throws {
        let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup)
        var reachable = false
        do {
            let response = try await client.execute(HTTPClientRequest(url: url.absoluteString), timeout: .seconds(5))
            _ = try? await response.body.collect(upTo: 1 << 20)
            reachable = true
        } catch {
            reachable = false
        }
        try await client.shutdown()
        try #require(
            reachable,
            "No server answers at \(url.absoluteString). Start it with `\(startCommand)` and run the tests again.")
    }

    /// A unique, valid bucket name.
    static func uniqueBucketName(_ label: String) -> String {
        "as-test-\(label)-\(UUID().uuidString.lowercased().prefix(13))"
    }
}

/// Deterministic bytes (a simple linear congruential sequence), so a misplaced range shows up.
func testBytes(count: Int, seed: UInt32 = 1) -> Data {
    var state = seed &* 2_654_435_761 &+ 1
    var bytes = [UInt8](repeating: 0, count: count)
    for index in 0..<count {
        state = state &* 1_664_525 &+ 1_013_904_223
        bytes[index] = UInt8(truncatingIfNeeded: state >> 24)
    }
    let data = Data(bytes)
    return data
}

/// An attachment record for a filename.
func attachment(_ filename: String, mediaType: String? = nil) -> AttachmentSync.Attachment {
    AttachmentSync.Attachment(
        id: UUID().uuidString, filename: filename, state: .queuedUpload, mediaType: mediaType)
}

/// Collects progress reports, for checking the last one.
final class ProgressRecorder: Sendable {
    private let reports = LockedValue<[TransferProgress]>([])

    var handler: TransferProgressHandler {
        { progress in self.reports.withLock { $0.append(progress) } }
    }

    var last: TransferProgress? { reports.withLock { $0.last } }
    var all: [TransferProgress] { reports.withLock { $0 } }
}

/// A log handler that keeps every line (message and metadata) at every level, for checking what is logged.
struct CapturingLogHandler: LogHandler {
    let lines: LockedValue<[String]>
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        lines.withLock { $0.append("\(event.level) \(event.message) \(merged)") }
    }
}
