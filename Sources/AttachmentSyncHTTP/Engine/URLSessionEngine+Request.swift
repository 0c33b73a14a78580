import AttachmentSync
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

extension URLSessionEngine {
    /// The `URLRequest` for `request`: its method and headers as given, plus `Accept-Encoding: identity` and
    /// a `Content-Length` for a body when the request names none.
    ///
    /// `URLRequest` keeps one value per header name: repeated fields are joined with ", " (RFC 9110 §5.3).
    func makeURLRequest(_ request: HTTPEngineRequest) throws -> URLRequest {
        guard let url = URL(string: request.url), let scheme = url.scheme?.lowercased(),
            scheme == "http" || scheme == "https", url.host != nil
        else { throw URLSessionEngineError.invalidURL(request.url) }
        var urlRequest = URLRequest(
            url: url, cachePolicy: .reloadIgnoringLocalAndRemoteCacheData,
            timeoutInterval: Self.seconds(requestTimeout))
        urlRequest.httpMethod = request.method.rawValue
        urlRequest.httpShouldHandleCookies = false
        for field in request.headers {
            urlRequest.addValue(field.value, forHTTPHeaderField: field.name)
        }
        if request.headers.first(name: "Accept-Encoding") == nil {
            urlRequest.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        }
        switch request.body {
        case .none:
            break
        case .bytes, .file:
            if request.headers.first(name: "Content-Length") == nil {
                urlRequest.setValue(String(request.body.length), forHTTPHeaderField: "Content-Length")
            }
        }
        return urlRequest
    }

    /// How a request's body is handed to `URLSession`.
    struct PreparedBody: Sendable {
        enum Kind: Sendable {
            case none
            case data(Data)
            case file(URL)
        }

        var kind: Kind
    }

    /// Reads a file body through its file layer: a range up to ``Limits/inMemoryFileBody`` into memory, a
    /// longer one into a temporary copy (removed when the task completes).
    func prepareBody(_ body: HTTPEngineRequestBody, for exchange: URLSessionExchange) async throws -> PreparedBody {
        switch body {
        case .none:
            return PreparedBody(kind: .none)
        case .bytes(let data):
            return PreparedBody(kind: .data(data))
        case .file(let file):
            // A whole file goes from where it is: a copy would cost its size in writes, and on an iOS device
            // would hold a user's file in a temporary folder under another protection class.
            if file.offset == 0, (try? file.files.info(atPath: file.url.path))?.size == file.length {
                return PreparedBody(kind: .file(file.url))
            }
            if file.length <= limits.inMemoryFileBody {
                var data = Data(capacity: Int(file.length))
                try await file.files.readChunks(atPath: file.url.path, offset: file.offset, length: file.length) {
                    data.append($0)
                }
                return PreparedBody(kind: .data(data))
            }
            let copy = FileManager.default.temporaryDirectory.appendingPathComponent(
                "attachment-sync-upload-\(UUID().uuidString)")
            exchange.onFinish { try? FileManager.default.removeItem(at: copy) }
            statistics.recordTemporaryCopy()
            let writer = try file.files.openForWriting(atPath: copy.path, at: nil)
            defer { writer.close() }
            try await file.files.readChunks(atPath: file.url.path, offset: file.offset, length: file.length) {
                try writer.write($0)
            }
            return PreparedBody(kind: .file(copy))
        }
    }
}

/// A temporary file holding the part of a response body its reader has not taken yet. The delegate queue
/// writes (appending, at increasing offsets); the reader reads behind it.
///
/// `@unchecked Sendable`: `writer` is used only by the delegate queue (one operation at a time) and
/// `reader` only by the body's single reader (one `next` at a time); each `FileHandle` is used by one
/// thread at a time, and both are closed in `deinit`, when neither side holds the object any more.
final class SpillFile: @unchecked Sendable {
    let url: URL
    private let writer: FileHandle
    private let reader: FileHandle

    init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent(
            "attachment-sync-response-\(UUID().uuidString)")
        guard FileManager.default.createFile(atPath: url.path, contents: nil) else {
            throw AttachmentError(
                code: .fileSystem, message: "could not create \(url.path) to hold a response body",
                path: url.path)
        }
        do {
            writer = try FileHandle(forWritingTo: url)
            reader = try FileHandle(forReadingFrom: url)
        } catch {
            try? FileManager.default.removeItem(at: url)
            throw error
        }
    }

    func write(_ data: Data, at offset: Int64) throws {
        try fileSystem(path: url.path) {
            try writer.seek(toOffset: UInt64(offset))
            try writer.write(contentsOf: data)
        }
    }

    func read(at offset: Int64, count: Int) throws -> Data {
        try fileSystem(path: url.path) {
            try reader.seek(toOffset: UInt64(offset))
            let data = try reader.read(upToCount: count) ?? Data()
            guard data.count == count else {
                throw AttachmentError(
                    code: .fileSystem, message: "\(url.path) holds fewer bytes than were written to it",
                    path: url.path)
            }
            return data
        }
    }

    /// Removes the file's name (the open handles keep its content until they close).
    func remove() {
        try? FileManager.default.removeItem(at: url)
    }

    deinit {
        try? writer.close()
        try? reader.close()
        remove()
    }
}
