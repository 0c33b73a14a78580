import AttachmentSync
import Foundation
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// The adapters on the URLSession transport where it differs from AsyncHTTPClient's.
@Suite("Adapters on the URLSession transport")
struct URLSessionTransportTests {
    @Test("a file served gzip-encoded fails as a remote failure, not as an unreachable server retried for ever")
    func encodedDownloadIsARemoteFailure() async throws {
        let gzipOfHello = Data(base64Encoded: "H4sIAAAAAAAAA8tIzcnJBwCGphA2BQAAAA==")!
        let server = try await ScriptedHTTPServer.start { _ in
            ScriptedResponse(.ok, headers: [("Content-Encoding", "gzip")], body: gzipOfHello)
        }
        var configuration = HTTPRemoteStorage.Configuration(baseURL: server.baseURL.appendingPathComponent("files"))
        configuration.storesContentHashes = false
        let storage = try HTTPRemoteStorage(configuration: configuration, transport: .urlSession())
        try await withTemporaryDirectory { directory in
            let destination = directory.appendingPathComponent("photo.jpg")
            let error = await #expect(throws: AttachmentError.self) {
                _ = try await storage.downloadFile(attachment: attachment("photo.jpg"), into: destination, from: 0) {
                    _ in
                }
            }
            #expect(error?.code == .remoteFailure)
            #expect(error?.description.contains("gzip") == true, "\(String(describing: error))")
            #expect(error?.name == "photo.jpg")
        }
        try await storage.shutdown()
        await server.stop()
    }
}
