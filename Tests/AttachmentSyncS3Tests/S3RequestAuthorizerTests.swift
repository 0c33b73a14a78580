import AttachmentSync
import Foundation
import NIOHTTP1
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// The two ways ``S3RemoteStorage`` gets a request authorised, on their own and through the adapter: what
/// each lets a request carry, and what each does when the server refuses it.
@Suite("S3 request authorizers")
struct S3RequestAuthorizerTests {
    static let date = Date(timeIntervalSince1970: 1_369_353_600)

    static func configuration(
        endpoint: URL = URL(string: "http://127.0.0.1:9")!,
        credentials: S3RemoteStorage.CredentialsProvider = .static(
            accessKeyId: "AKIDEXAMPLE", secretAccessKey: "secret-key-never-shown")
    ) -> S3RemoteStorage.Configuration {
        var configuration = S3RemoteStorage.Configuration(
            endpoint: endpoint, bucket: "photos", credentials: credentials, keyPrefix: "app/")
        configuration.now = { Self.date }
        return configuration
    }

    /// An upload request as the adapter builds it, with a header a hostile device might add.
    static let put = S3Request(
        method: .put, key: "app/a.jpg",
        headers: [
            ("content-md5", "1B2M2Y8AsgTpgAmY7PhCfg=="), ("x-amz-meta-sha256", String(repeating: "a", count: 64)),
            ("content-type", "image/jpeg"), ("if-none-match", "*"), ("x-amz-copy-source", "other/secret.jpg"),
        ],
        body: .data(Data()), payload: .empty, operation: "PutObject")

    @Test("SigV4 signs every header it sends, for the configured date, at the object's URL")
    func sigV4SignsWhatItSends() async throws {
        let authorizer = SigV4RequestAuthorizer(configuration: Self.configuration())
        let authorized = try await authorizer.authorize(Self.put, renewing: false)
        #expect(authorized.url == "http://127.0.0.1:9/photos/app/a.jpg")
        let names = authorized.headers.map { $0.name.lowercased() }
        let authorization = try #require(authorized.headers.first { $0.name.lowercased() == "authorization" })
        let signed = try #require(authorization.value.split(separator: " ").first { $0.hasPrefix("SignedHeaders=") })
        let signedNames = signed.dropFirst("SignedHeaders=".count).dropLast().split(separator: ";").map(String.init)
        // Every header sent but the signature itself is signed, so the server checks all of them.
        #expect(Set(names).subtracting(["authorization"]) == Set(signedNames))
        #expect(signedNames.contains("x-amz-copy-source") && signedNames.contains("host"))
        #expect(authorized.headers.first { $0.name.lowercased() == "x-amz-date" }?.value == "20130524T000000Z")
        #expect(authorizer.splitsDownloads)
        #expect(!authorizer.renewsRefusedRequests)
    }

    @Test("a presigned request carries the backend's headers and only its own that need no signature")
    func presignedSendsOnlyWhatTheBackendSigned() async throws {
        let authorizations = PresignedAuthorizations(
            authorize: { operation in
                #expect(operation.kind == .put)
                #expect(operation.createOnly == true)
                return PresignedAuthorization(
                    url: URL(string: "https://s3.example.com/photos/users/u1/a.jpg?X-Amz-Signature=abc")!,
                    headers: ["x-amz-meta-sha256": String(repeating: "a", count: 64), "Host": "evil.example.com"],
                    expiresAt: Self.date.addingTimeInterval(3600))
            }, margin: .seconds(60), now: { Self.date })
        let authorizer = PresignedRequestAuthorizer(authorizations: authorizations, logger: .init(label: "test"))

        let authorized = try await authorizer.authorize(Self.put, renewing: false)

        #expect(authorized.url == "https://s3.example.com/photos/users/u1/a.jpg?X-Amz-Signature=abc")
        let sent = Dictionary(authorized.headers.map { ($0.name.lowercased(), $0.value) }) { first, _ in first }
        // The backend's signed header, the request's unsigned ones; never an unsigned x-amz- header (Ceph
        // would accept x-amz-copy-source unsigned) nor a Host of anyone's choosing.
        #expect(sent["x-amz-meta-sha256"] == String(repeating: "a", count: 64))
        #expect(sent["content-md5"] == "1B2M2Y8AsgTpgAmY7PhCfg==")
        #expect(sent["if-none-match"] == "*")
        #expect(sent["content-type"] == "image/jpeg")
        #expect(sent["x-amz-copy-source"] == nil)
        #expect(sent["host"] == nil)
        #expect(authorized.headers.count == 4)
        #expect(!authorizer.splitsDownloads)
        #expect(authorizer.renewsRefusedRequests)
        let error = await #expect(throws: AttachmentError.self) {
            _ = try await authorizer.presignedURL(
                key: "a.jpg", method: .get, expiresIn: .seconds(60), attachmentId: "a")
        }
        #expect(error?.code == .unsupported)
    }

    @Test("a signed request the server refuses is sent once, and the next one asks for new credentials")
    func refusedSignatureIsFinalAndDropsCredentials() async throws {
        let server = try await ScriptedHTTPServer.start { _ in ScriptedResponse(.forbidden) }
        let provided = LockedValue(0)
        var configuration = Self.configuration(
            endpoint: server.baseURL,
            credentials: .custom {
                provided.withLock { $0 += 1 }
                return S3Credentials(accessKeyId: "AKIDEXAMPLE", secretAccessKey: "secret-key-never-shown")
            })
        configuration.createOnly = false
        let storage = try S3RemoteStorage(configuration: configuration)
        for _ in 0..<2 {
            let error = await #expect(throws: AttachmentError.self) {
                try await storage.uploadFile(data: Data("photo".utf8), attachment: attachment("a.jpg"))
            }
            #expect(error?.code == .accessDenied)
        }
        try await storage.shutdown()
        await server.stop()
        #expect(server.requests.count == 2, "one request per upload: a signature is not renewed")
        #expect(provided.withLock { $0 } == 2, "each refusal drops the cached credentials")
    }
}
