import AttachmentSync
import AttachmentSyncS3
import Crypto
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(FoundationXML)
    import FoundationXML
#endif

/// The S3 server P6 talks to: the local Ceph gateway of `scripts/s3-server`, or whatever the same
/// environment variables name (`eval "$(scripts/s3-server env)"` sets them).
struct S3Server: Sendable {
    /// The server's base URL, `http://127.0.0.1:7480`.
    var endpoint: URL
    /// The region to sign for.
    var region: String
    /// The access key id.
    var accessKeyId: String
    /// The secret access key.
    var secretAccessKey: String

    /// `ATTACHMENT_SYNC_S3_ENDPOINT`, `…_ACCESS_KEY`, `…_SECRET_KEY` and `…_REGION`, each defaulting to what
    /// `scripts/s3-server env` prints.
    static func fromEnvironment() throws -> S3Server {
        let environment = ProcessInfo.processInfo.environment
        let text = environment["ATTACHMENT_SYNC_S3_ENDPOINT"] ?? "http://127.0.0.1:7480"
        guard let endpoint = URL(string: text), endpoint.host != nil else {
            throw BenchmarkFailure("ATTACHMENT_SYNC_S3_ENDPOINT is not a URL: \(text)")
        }
        return S3Server(
            endpoint: endpoint,
            region: environment["ATTACHMENT_SYNC_S3_REGION"] ?? "us-east-1",
            accessKeyId: environment["ATTACHMENT_SYNC_S3_ACCESS_KEY"] ?? "ATTACHMENTSYNCTEST0001",
            secretAccessKey: environment["ATTACHMENT_SYNC_S3_SECRET_KEY"]
                ?? "attachment-sync-test-secret-0000000000001")
    }

    /// The endpoint without a trailing slash, as the tools' command lines take it.
    var endpointString: String {
        var text = endpoint.absoluteString
        while text.hasSuffix("/") { text.removeLast() }
        return text
    }

    /// The credentials, for signing.
    var credentials: S3Credentials {
        S3Credentials(accessKeyId: accessKeyId, secretAccessKey: secretAccessKey)
    }

    /// An adapter for `bucket` whose objects are `keyPrefix` + filename (path-style, static keys), keeping
    /// the state of multipart uploads (none at 64 KiB) in `stateDirectory`. Shut it down when done.
    func storage(
        bucket: String, keyPrefix: String, stateDirectory: URL,
        configure: (inout S3RemoteStorage.Configuration) -> Void = { _ in }
    ) throws -> S3RemoteStorage {
        var configuration = S3RemoteStorage.Configuration(
            endpoint: endpoint, region: region, bucket: bucket,
            credentials: .static(accessKeyId: accessKeyId, secretAccessKey: secretAccessKey),
            keyPrefix: keyPrefix, addressing: .path)
        configuration.stateDirectory = stateDirectory
        configure(&configuration)
        return try S3RemoteStorage(configuration: configuration, transport: BenchTransport.current.transport)
    }
}

/// The HTTP client library the S3 scenarios' adapters send with: `--transport`, passed on to the scenarios'
/// child processes in `ATTACHMENT_SYNC_BENCH_TRANSPORT`.
enum BenchTransport: String, CaseIterable, Sendable {
    case asyncHTTPClient = "asynchttpclient"
    case urlSession = "urlsession"

    static let environmentVariable = "ATTACHMENT_SYNC_BENCH_TRANSPORT"

    /// The transport this process was told to use, AsyncHTTPClient by default.
    static var current: BenchTransport {
        ProcessInfo.processInfo.environment[environmentVariable].flatMap { BenchTransport(rawValue: $0) }
            ?? .asyncHTTPClient
    }

    /// Makes this the transport of this process and of the children it starts.
    func makeCurrent() {
        setenv(Self.environmentVariable, rawValue, 1)
    }

    var transport: RemoteTransport {
        switch self {
        case .asyncHTTPClient: .asyncHTTPClient()
        case .urlSession: .urlSession()
        }
    }

    var name: String {
        switch self {
        case .asyncHTTPClient: "AsyncHTTPClient"
        case .urlSession: "URLSession"
        }
    }
}

/// One object of a listing.
struct ListedObject: Sendable {
    /// Its size in bytes.
    var size: Int64
    /// Its ETag without the quotes: the MD5 of the content, in hex, for an object uploaded in one request.
    var etag: String
}

/// The bucket-level requests P6 needs and ``S3RemoteStorage`` does not make (it works on one object at a
/// time): listing a prefix, deleting many objects at once, deleting the bucket, reading the start of an
/// object (P9E). Signed with the library's ``SigV4Signer`` and sent with `URLSession`; not timed, only for
/// checking and cleaning up.
struct S3Bucket: Sendable {
    /// The server.
    let server: S3Server
    /// The bucket's name.
    let name: String

    /// Every object whose key starts with `prefix`, by key (ListObjectsV2, 1,000 keys a page).
    func list(prefix: String) async throws -> [String: ListedObject] {
        var objects: [String: ListedObject] = [:]
        var token: String?
        repeat {
            var query = [(name: "list-type", value: "2"), (name: "prefix", value: prefix)]
            if let token { query.append((name: "continuation-token", value: token)) }
            let (status, body) = try await send(method: "GET", query: query)
            guard status == 200, let page = ListingPage.parse(body) else {
                throw BenchmarkFailure("listing \(name)/\(prefix) failed: HTTP \(status) \(Self.excerpt(body))")
            }
            for object in page.objects { objects[object.key] = ListedObject(size: object.size, etag: object.etag) }
            token = page.isTruncated ? page.nextToken : nil
        } while token != nil
        return objects
    }

    /// Deletes the objects with these keys, 1,000 per request (DeleteObjects).
    func delete(keys: [String]) async throws {
        var start = 0
        while start < keys.count {
            let batch = keys[start..<min(start + 1000, keys.count)]
            start += batch.count
            var xml = "<Delete><Quiet>true</Quiet>"
            for key in batch { xml += "<Object><Key>\(Self.escape(key))</Key></Object>" }
            xml += "</Delete>"
            let body = Data(xml.utf8)
            let md5 = Data(Insecure.MD5.hash(data: body)).base64EncodedString()
            let (status, reply) = try await send(
                method: "POST", query: [(name: "delete", value: "")], headers: [("content-md5", md5)], body: body)
            guard status == 200, !String(decoding: reply, as: UTF8.self).contains("<Error>") else {
                throw BenchmarkFailure("deleting objects in \(name) failed: HTTP \(status) \(Self.excerpt(reply))")
            }
        }
    }

    /// Deletes every object under `prefix`.
    func deleteAll(prefix: String) async throws {
        try await delete(keys: Array(try await list(prefix: prefix).keys))
    }

    /// Deletes the bucket, which must be empty.
    func deleteBucket() async throws {
        let (status, reply) = try await send(method: "DELETE", query: [])
        guard (200..<300).contains(status) else {
            throw BenchmarkFailure("deleting bucket \(name) failed: HTTP \(status) \(Self.excerpt(reply))")
        }
    }

    /// The first `count` bytes of the object `key` (a ranged GET), or fewer when it is shorter.
    func firstBytes(of key: String, count: Int) async throws -> Data {
        let (status, body) = try await send(
            method: "GET", key: key, query: [], headers: [("range", "bytes=0-\(count - 1)")])
        guard status == 206 || status == 200 else {
            throw BenchmarkFailure("reading the start of \(name)/\(key) failed: HTTP \(status) \(Self.excerpt(body))")
        }
        return body.prefix(count)
    }

    /// Signs and sends a request on the bucket, or on its object `key`; returns the status and the body.
    private func send(
        method: String, key: String? = nil, query: [(name: String, value: String)],
        headers: [(name: String, value: String)] = [], body: Data = Data()
    ) async throws -> (status: Int, body: Data) {
        var host = server.endpoint.host ?? ""
        if let port = server.endpoint.port { host += ":\(port)" }
        var basePath = server.endpoint.path
        while basePath.hasSuffix("/") { basePath.removeLast() }
        let signed = SigV4Signer(region: server.region).sign(
            SigV4Signer.Request(
                method: method, path: basePath + "/" + name + (key.map { "/" + $0 } ?? ""), query: query,
                headers: [("host", host)] + headers),
            payload: .hashing(body), credentials: server.credentials, date: Date())
        let scheme = server.endpoint.scheme ?? "http"
        let suffix = signed.encodedQuery.isEmpty ? "" : "?" + signed.encodedQuery
        guard let url = URL(string: "\(scheme)://\(host)\(signed.encodedPath)\(suffix)") else {
            throw BenchmarkFailure("cannot make a URL for bucket \(name)")
        }
        var request = URLRequest(url: url)
        request.httpMethod = method
        for (name, value) in signed.headers where name.lowercased() != "host" {
            request.setValue(value, forHTTPHeaderField: name)
        }
        if !body.isEmpty { request.httpBody = body }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, data)
    }

    /// The first 300 characters of a reply, for an error message.
    private static func excerpt(_ body: Data) -> String {
        String(String(decoding: body, as: UTF8.self).prefix(300))
    }

    /// Escapes a key for an XML element's content.
    private static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
    }
}

/// One page of a ListObjectsV2 reply.
private struct ListingPage {
    /// An object's key, size and ETag (unquoted).
    var objects: [(key: String, size: Int64, etag: String)] = []
    /// Whether more pages follow.
    var isTruncated = false
    /// The token for the next page.
    var nextToken: String?

    /// Parses a reply, or returns `nil` when it is not a `ListBucketResult`.
    static func parse(_ data: Data) -> ListingPage? {
        let reader = Reader()
        let parser = XMLParser(data: data)
        parser.delegate = reader
        guard parser.parse(), reader.sawResult else { return nil }
        return reader.page
    }

    /// Collects the elements of interest; used on one thread inside ``parse(_:)``.
    private final class Reader: NSObject, XMLParserDelegate {
        var page = ListingPage()
        var sawResult = false
        private var path: [String] = []
        private var text = ""
        private var key = ""
        private var size: Int64 = -1
        private var etag = ""

        func parser(
            _ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?,
            qualifiedName qName: String?, attributes attributeDict: [String: String] = [:]
        ) {
            if elementName == "ListBucketResult" { sawResult = true }
            if elementName == "Contents" { (key, size, etag) = ("", -1, "") }
            path.append(elementName)
            text = ""
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            text += string
        }

        func parser(
            _ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName qName: String?
        ) {
            _ = path.popLast()
            let inContents = path.last == "Contents"
            switch elementName {
            case "Key" where inContents: key = text
            case "Size" where inContents: size = Int64(text.trimmingCharacters(in: .whitespaces)) ?? -1
            case "ETag" where inContents:
                etag = text.trimmingCharacters(in: CharacterSet(charactersIn: "\" ")).lowercased()
            case "Contents": page.objects.append((key, size, etag))
            case "IsTruncated": page.isTruncated = text.trimmingCharacters(in: .whitespaces) == "true"
            case "NextContinuationToken": page.nextToken = text
            default: break
            }
            text = ""
        }
    }
}

extension S3Bucket {
    /// Creates the bucket with the adapter, saying how to start the server when it is not reachable.
    func create(folder: WorkFolder) async throws {
        let storage = try server.storage(
            bucket: name, keyPrefix: "", stateDirectory: try folder.makeFolder("multipart-state"))
        do {
            try await storage.createBucket()
            try await storage.shutdown()
        } catch {
            try? await storage.shutdown()
            throw BenchmarkFailure(
                "cannot create a bucket on the S3 server at \(server.endpointString) (start it with "
                    + "`scripts/s3-server start`, see scripts/SERVERS.md): \(error)")
        }
    }

    /// Uploads `objects` as `prefix` + name through the adapter, `concurrency` at a time (not timed: set-up).
    func put(_ objects: [(name: String, data: Data)], prefix: String, concurrency: Int) async throws {
        try await withWorkFolder("put") { folder in
            let storage = try server.storage(
                bucket: name, keyPrefix: prefix, stateDirectory: try folder.makeFolder("state"))
            do {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for (index, object) in objects.enumerated() {
                        if index >= concurrency { try await group.next() }
                        group.addTask {
                            try await storage.uploadFile(
                                data: object.data,
                                attachment: Attachment(id: object.name, filename: object.name, state: .queuedUpload))
                        }
                    }
                    try await group.waitForAll()
                }
                try await storage.shutdown()
            } catch {
                try? await storage.shutdown()
                throw error
            }
        }
    }
}

extension S3Bucket {
    /// Creates a bucket for the run (`attachment-sync-bench-<label>-<random>`), runs `body` with it, then
    /// empties and deletes it, however `body` ends.
    static func withNew<T: Sendable>(
        server: S3Server, label: String, folder: WorkFolder, _ body: (S3Bucket) async throws -> T
    ) async throws -> T {
        let bucket = S3Bucket(
            server: server, name: "attachment-sync-bench-\(label)-" + UUID().uuidString.lowercased().prefix(13))
        try await bucket.create(folder: folder)
        do {
            let result = try await body(bucket)
            try await bucket.deleteAll(prefix: "")
            try await bucket.deleteBucket()
            return result
        } catch {
            try? await bucket.deleteAll(prefix: "")
            try? await bucket.deleteBucket()
            throw error
        }
    }
}

extension S3Server {
    /// An rclone config file in `folder` with one remote, `name`: this server as an S3 remote of provider
    /// Ceph, path-style, with its static keys.
    func rcloneConfig(remote name: String, in folder: WorkFolder) throws -> URL {
        let config = folder.file("rclone.conf")
        let text = """
            [\(name)]
            type = s3
            provider = Ceph
            access_key_id = \(accessKeyId)
            secret_access_key = \(secretAccessKey)
            region = \(region)
            endpoint = \(endpointString)
            force_path_style = true

            """
        try Data(text.utf8).write(to: config)
        return config
    }
}
