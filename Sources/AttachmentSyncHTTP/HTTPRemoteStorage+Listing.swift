import AttachmentSync
import Foundation

extension HTTPRemoteStorage: ListableRemoteStorage {
    /// The files directly in the base URL's folder, from one WebDAV `PROPFIND` with `Depth: 1`, named by
    /// their decoded last path segment, with `getcontentlength` and `getlastmodified`. Subfolders and the
    /// companion files of stored hashes are left out; a folder the server does not have (nothing uploaded
    /// yet) lists no files. A server without WebDAV answers 405 or 501: `unsupported`.
    ///
    /// The listing is one page: WebDAV has no paging.
    public func listFiles(after continuation: String?) async throws -> RemoteFileListing {
        guard continuation == nil else { return RemoteFileListing(files: [], next: nil) }
        var base = configuration.baseURL.absoluteString
        while base.hasSuffix("/") { base.removeLast() }
        guard let folder = URL(string: base + "/") else {
            throw AttachmentError(code: .invalidConfiguration, message: "cannot list \(base)/")
        }
        var request = try await request(.propfind, url: folder, attachmentId: nil, name: nil)
        request.headers.replaceOrAdd(name: "depth", value: "1")
        request.headers.replaceOrAdd(name: "content-type", value: "application/xml; charset=utf-8")
        request.body = .bytes(
            Data(
                (#"<?xml version="1.0" encoding="utf-8"?><D:propfind xmlns:D="DAV:"><D:prop>"#
                    + "<D:getcontentlength/><D:getlastmodified/><D:resourcetype/></D:prop></D:propfind>").utf8))
        let event = RequestEvent(operation: "PROPFIND", method: "PROPFIND", object: folder.path)
        let response = try await transport.send(request, event: event, attachmentId: nil) {
            $0 == .multistatus || $0 == .notFound || $0 == .methodNotAllowed || $0 == .notImplemented
        }
        let body = try await transport.collect(response, event: event, attachmentId: nil, upTo: 64 << 20)
        switch response.status {
        case .notFound:
            return RemoteFileListing(files: [], next: nil)
        case .methodNotAllowed, .notImplemented:
            throw AttachmentError(
                code: .unsupported,
                message: "the server at \(folder.absoluteString) cannot list a folder (it answered PROPFIND with "
                    + "\(response.status.code)): listing needs WebDAV")
        default:
            break
        }
        guard let root = S3XML.parse(body), root.name == "multistatus" else {
            throw AttachmentError(
                code: .remoteFailure,
                message: "the server's answer to PROPFIND \(folder.path) is not a WebDAV multistatus document")
        }
        let folderPath = folder.path.hasSuffix("/") ? folder.path : folder.path + "/"
        var files: [RemoteFile] = []
        for entry in root.children("response") {
            guard let href = entry.value("href"), let path = Self.decodedPath(href), path.hasPrefix(folderPath)
            else { continue }
            let name = String(path.dropFirst(folderPath.count))
            guard !name.isEmpty, !name.contains("/"), !name.hasPrefix(Self.contentHashPrefix) else { continue }
            let properties = entry.children("propstat")
                .filter { $0.value("status")?.contains(" 200 ") ?? true }
                .compactMap { $0.child("prop") }
            guard !properties.contains(where: { $0.child("resourcetype")?.child("collection") != nil }),
                let size = properties.lazy.compactMap({ $0.value("getcontentlength").flatMap { Int64($0) } }).first
            else { continue }
            let modified = properties.lazy.compactMap { $0.value("getlastmodified").flatMap(Self.parseHTTPDate) }
                .first
            files.append(RemoteFile(storedName: name, filename: name, size: size, lastModified: modified))
        }
        files.sort { $0.storedName.utf8.lexicographicallyPrecedes($1.storedName.utf8) }
        return RemoteFileListing(files: files, next: nil)
    }

    /// The filename itself: its URL is the base URL and the filename as one percent-encoded segment.
    ///
    /// - Throws: `invalidName` for a name ``url(for:)`` rejects.
    public func storedName(forFilename filename: String) throws -> String {
        _ = try url(for: Attachment(id: filename, filename: filename, state: .archived))
        return filename
    }

    /// Deletes the listed file and its stored SHA-256; succeeds when they do not exist.
    public func deleteListedFile(_ file: RemoteFile) async throws {
        try await deleteFile(attachment: Attachment(id: file.storedName, filename: file.storedName, state: .archived))
    }

    /// The file's size (from a `HEAD`) and its stored SHA-256 (when
    /// ``Configuration/storesContentHashes``); `nil` on 404 or 410.
    public func fileInfo(attachment: Attachment) async throws -> RemoteObjectInfo? {
        let request = try await request(.head, url: try url(for: attachment), attachment: attachment)
        let event = event("HEAD", attachment)
        let response = try await transport.send(request, event: event, attachmentId: attachment.id) {
            $0 == .ok || $0 == .notFound || $0 == .gone
        }
        _ = try await transport.collect(
            response, event: event, attachmentId: attachment.id, upTo: HTTPTransport.maxErrorBody)
        guard response.status == .ok else { return nil }
        let sha256 = configuration.storesContentHashes ? try await storedContentHash(of: attachment) : nil
        return RemoteObjectInfo(
            size: response.headers.first(name: "content-length").flatMap { Int64($0) }, sha256: sha256)
    }

    /// The percent-decoded path of an `href`, which is a path or a full URL.
    static func decodedPath(_ href: String) -> String? {
        URLComponents(string: href)?.percentEncodedPath.removingPercentEncoding
    }

    /// An HTTP date (`Tue, 24 Nov 2026 22:35:17 GMT`).
    static func parseHTTPDate(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        return formatter.date(from: text)
    }
}
