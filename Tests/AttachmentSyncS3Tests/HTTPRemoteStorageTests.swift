import AsyncHTTPClient
import AttachmentSync
import Foundation
import NIOCore
import NIOHTTP1
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// A folder of its own on the local nginx WebDAV server for one test, deleted afterwards.
struct WebDAVTestFolder {
    let url: URL

    /// Runs `body` with an adapter on a fresh folder under `/open/` (or `/auth/` with the bearer token), then
    /// deletes the folder, whether `body` succeeded or not.
    static func with(
        authenticated: Bool = false, transport: TestTransport = .asyncHTTPClient,
        configure: (inout HTTPRemoteStorage.Configuration) -> Void = { _ in },
        _ body: (HTTPRemoteStorage, WebDAVTestFolder) async throws -> Void
    ) async throws {
        try await TestServers.requireReachable(TestServers.webdav, startCommand: "scripts/webdav-server start")
        let area = authenticated ? "auth" : "open"
        let folder = WebDAVTestFolder(
            url: TestServers.webdav.appendingPathComponent("\(area)/test-\(UUID().uuidString.lowercased())"))
        let storage = try folder.makeStorage(authenticated: authenticated, transport: transport, configure)
        var failure: (any Error)?
        do {
            try await body(storage, folder)
        } catch {
            failure = error
        }
        do {
            try await folder.delete(authenticated: authenticated, engine: storage.transport.engine)
        } catch {
            Issue.record("could not delete \(folder.url): \(error)")
        }
        try await storage.shutdown()
        if let failure { throw failure }
    }

    func makeStorage(
        authenticated: Bool, transport: TestTransport = .asyncHTTPClient,
        _ configure: (inout HTTPRemoteStorage.Configuration) -> Void = { _ in }
    ) throws -> HTTPRemoteStorage {
        var configuration = HTTPRemoteStorage.Configuration(baseURL: url)
        if authenticated {
            configuration.headers = { [("Authorization", "Bearer \(TestServers.webdavToken)")] }
        }
        configure(&configuration)
        return try HTTPRemoteStorage(configuration: configuration, transport: transport.transport)
    }

    /// Deletes the folder (WebDAV `DELETE` of a collection); a folder never created is fine.
    func delete(authenticated: Bool, engine: any HTTPEngine) async throws {
        var request = HTTPEngineRequest(method: .delete, url: url.absoluteString + "/")
        if authenticated {
            request.headers.add(name: "Authorization", value: "Bearer \(TestServers.webdavToken)")
        }
        let response = try await engine.execute(request)
        _ = try await response.body.collect(upTo: 1 << 20)
        try #require(
            response.status.isSuccess || response.status == .notFound,
            "DELETE \(url): \(response.status)")
    }
}

/// HTTPRemoteStorage against the real nginx WebDAV server on 127.0.0.1 (`scripts/webdav-server start`).
@Suite("HTTPRemoteStorage on nginx WebDAV")
struct HTTPRemoteStorageTests {
    static let mebibyte = 1024 * 1024

    @Test("files of 0 bytes, 1 KiB and 12 MiB come back byte for byte, streamed and in memory")
    func roundTripsFilesOfEverySize() async throws {
        try await WebDAVTestFolder.with { storage, _ in
            try await withTemporaryDirectory { directory in
                for (index, size) in [0, 1024, 12 * Self.mebibyte].enumerated() {
                    let content = testBytes(count: size, seed: UInt32(index + 10))
                    let source = directory.appendingPathComponent("source-\(index)")
                    try content.write(to: source)
                    let file = attachment("file-\(index).bin", mediaType: "application/octet-stream")
                    let total = Int64(size)
                    let uploadProgress = ProgressRecorder()
                    try await storage.uploadFile(fileURL: source, attachment: file, progress: uploadProgress.handler)
                    #expect(uploadProgress.last == TransferProgress(completedBytes: total, totalBytes: total))

                    let destination = directory.appendingPathComponent("nested/destination-\(index)")
                    let downloadProgress = ProgressRecorder()
                    try await storage.downloadFile(
                        attachment: file, to: destination, progress: downloadProgress.handler)
                    #expect(try Data(contentsOf: destination) == content, "streamed download of \(size) bytes")
                    #expect(downloadProgress.last == TransferProgress(completedBytes: total, totalBytes: total))
                    let inMemory = try await storage.downloadFile(attachment: file)
                    #expect(inMemory == content, "Data download of \(size) bytes")

                    let copy = attachment("copy-\(index).bin")
                    try await storage.uploadFile(data: content, attachment: copy)
                    let copied = try await storage.downloadFile(attachment: copy)
                    #expect(copied == content, "Data upload of \(size) bytes")
                }
            }
        }
    }

    @Test("filenames with spaces, unicode and reserved characters round trip as one path segment")
    func roundTripsAwkwardFilenames() async throws {
        try await WebDAVTestFolder.with { storage, _ in
            for (index, name) in ["photo 1 (copy).jpg", "résumé-ሴ.pdf", "a+b=c&d;e,f@g$h!'*~%20#x?.txt"].enumerated() {
                let content = Data("content \(index)".utf8)
                try await storage.uploadFile(data: content, attachment: attachment(name))
                #expect(try await storage.downloadFile(attachment: attachment(name)) == content, "\(name)")
                let url = try storage.url(for: attachment(name))
                #expect(url.absoluteString.hasPrefix(storage.configuration.baseURL.absoluteString + "/"))
                #expect(
                    !url.absoluteString.dropFirst(storage.configuration.baseURL.absoluteString.count + 1).contains("/"))
            }
        }
    }

    @Test("filenames that a server could resolve to another folder are rejected before any request")
    func pathLikeFilenamesAreRejected() async throws {
        let storage = try HTTPRemoteStorage(configuration: .init(baseURL: URL(string: "http://127.0.0.1:9/files")!))
        for name in ["", ".", "..", "../escape.txt", "a/b.txt", "a\\b.txt", ".attachment-sync-sha256-photo.jpg"] {
            let error = await #expect(throws: AttachmentError.self) {
                try await storage.uploadFile(data: Data("x".utf8), attachment: attachment(name))
            }
            #expect(error?.code == .invalidName, "\(String(reflecting: name))")
        }
        try await storage.shutdown()
    }

    @Test("uploads are create-only: the same content again succeeds, other content is a conflict and kept out")
    func createOnlyUploads() async throws {
        try await WebDAVTestFolder.with { storage, _ in
            let file = attachment("photo.jpg")
            let first = Data("first version".utf8)
            try await storage.uploadFile(data: first, attachment: file)
            try await storage.uploadFile(data: first, attachment: file)
            let conflict = await #expect(throws: AttachmentError.self) {
                try await storage.uploadFile(data: Data("second".utf8), attachment: file)
            }
            #expect(conflict?.code == .conflict)
            #expect(try await storage.downloadFile(attachment: file) == first)
        }
        let replace: (inout HTTPRemoteStorage.Configuration) -> Void = { $0.createOnly = false }
        try await WebDAVTestFolder.with(configure: replace) { storage, _ in
            let file = attachment("photo.jpg")
            try await storage.uploadFile(data: Data("first version".utf8), attachment: file)
            try await storage.uploadFile(data: Data("second".utf8), attachment: file)
            #expect(try await storage.downloadFile(attachment: file) == Data("second".utf8), "createOnly off")
        }
    }

    @Test("deleting twice, or deleting a name never uploaded, succeeds; a missing file is remoteNotFound")
    func deleteIsIdempotentAndMissingIsNotFound() async throws {
        try await WebDAVTestFolder.with { storage, _ in
            let file = attachment("photo.jpg")
            try await storage.uploadFile(data: Data("x".utf8), attachment: file)
            try await storage.deleteFile(attachment: file)
            try await storage.deleteFile(attachment: file)
            try await storage.deleteFile(attachment: attachment("never-uploaded.jpg"))
            let error = await #expect(throws: AttachmentError.self) { try await storage.downloadFile(attachment: file) }
            #expect(error?.code == .remoteNotFound)
            #expect(error?.attachmentId == file.id)
        }
    }

    @Test("a download resumed from byte N appends the rest, and progress counts the whole file")
    func rangedDownloadResumes() async throws {
        try await WebDAVTestFolder.with { storage, _ in
            try await withTemporaryDirectory { directory in
                #expect(storage.supportsRangedDownloads)
                let content = testBytes(count: 2 * Self.mebibyte + 5)
                let file = attachment("video.mp4")
                try await storage.uploadFile(data: content, attachment: file)
                for offset in [1, 999_999, content.count - 1, content.count] {
                    let partial = directory.appendingPathComponent("partial-\(offset)")
                    try content.prefix(offset).write(to: partial)
                    let progress = ProgressRecorder()
                    try await storage.downloadFile(
                        attachment: file, appendingTo: partial, from: Int64(offset), progress: progress.handler)
                    #expect(try Data(contentsOf: partial) == content, "resumed at \(offset)")
                    #expect(progress.all.first?.completedBytes == Int64(offset))
                    #expect(progress.last?.completedBytes == Int64(content.count))
                }
            }
        }
    }

    @Test("the bearer token from the headers provider opens /auth/, and is fetched for every request")
    func bearerTokenIsSentWithEveryRequest() async throws {
        let calls = LockedValue(0)
        let configure: (inout HTTPRemoteStorage.Configuration) -> Void = { configuration in
            configuration.headers = {
                calls.withLock { $0 += 1 }
                return [("Authorization", "Bearer \(TestServers.webdavToken)")]
            }
        }
        try await WebDAVTestFolder.with(authenticated: true, configure: configure) { storage, _ in
            let file = attachment("private.jpg")
            try await storage.uploadFile(data: Data("private".utf8), attachment: file)
            #expect(try await storage.downloadFile(attachment: file) == Data("private".utf8))
            try await storage.deleteFile(attachment: file)
            // Six requests: the upload looks first (HEAD, create-only), and the upload and the delete each
            // write or remove the stored SHA-256 beside the file.
            #expect(calls.withLock { $0 } == 6)
        }
    }

    @Test("a wrong or missing bearer token is accessDenied, and the token appears in no error text")
    func wrongTokenIsAccessDenied() async throws {
        try await WebDAVTestFolder.with(authenticated: true) { _, folder in
            let wrongToken = "wrong-token-\(UUID().uuidString)"
            for headers in [[("Authorization", "Bearer \(wrongToken)")], []] {
                let storage = try folder.makeStorage(authenticated: true) { configuration in
                    configuration.headers = { headers }
                }
                let file = attachment("private.jpg")
                let upload = await #expect(throws: AttachmentError.self) {
                    try await storage.uploadFile(data: Data("x".utf8), attachment: file)
                }
                let download = await #expect(throws: AttachmentError.self) {
                    _ = try await storage.downloadFile(attachment: file)
                }
                try await storage.shutdown()
                for error in [upload, download] {
                    #expect(error?.code == .accessDenied)
                    #expect((error?.underlying as? RemoteHTTPError)?.statusCode == 401)
                    #expect(!String(describing: error).contains(wrongToken))
                    #expect(!String(describing: error).contains(TestServers.webdavToken))
                }
            }
        }
    }

    @Test("a headers provider that throws fails the request with accessDenied before it is sent")
    func failingHeadersProviderIsAccessDenied() async throws {
        let storage = try HTTPRemoteStorage(
            configuration: .init(baseURL: TestServers.webdav.appendingPathComponent("auth")) {
                throw URLError(.userAuthenticationRequired)
            })
        let error = await #expect(throws: AttachmentError.self) {
            _ = try await storage.downloadFile(attachment: attachment("a.jpg"))
        }
        try await storage.shutdown()
        #expect(error?.code == .accessDenied)
        #expect(error?.underlying is URLError)
    }

    @Test("a server that cannot be reached is remoteUnavailable")
    func unreachableServerIsRemoteUnavailable() async throws {
        var configuration = HTTPRemoteStorage.Configuration(baseURL: URL(string: "http://127.0.0.1:9/files")!)
        configuration.connectTimeout = .seconds(2)
        let storage = try HTTPRemoteStorage(configuration: configuration)
        let error = await #expect(throws: AttachmentError.self) {
            _ = try await storage.downloadFile(attachment: attachment("a.jpg"))
        }
        try await storage.shutdown()
        #expect(error?.code == .remoteUnavailable)
    }
}
