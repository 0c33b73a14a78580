import Foundation

@testable import AttachmentSync

/// A fault the model's remote applies to the next matching call.
enum RemoteFault: Sendable, Hashable, CustomStringConvertible {
    /// The call fails: the server is unreachable.
    case unavailable
    /// The call fails with a `Retry-After` of `seconds` (absurd values included).
    case retryAfter(seconds: Int64)
    /// A download answers "not found" although the object exists.
    case notFound
    /// A download writes only the first half of the object, and reports success.
    case truncate
    /// A download writes the object with one byte changed, and reports success.
    case corrupt

    var description: String {
        switch self {
        case .unavailable: "unavailable"
        case .retryAfter(let seconds): "retryAfter(\(seconds))"
        case .notFound: "notFound"
        case .truncate: "truncate"
        case .corrupt: "corrupt"
        }
    }
}

/// The server side of the model's remote storage: objects by filename (byte-exact keys, as S3), each with
/// the SHA-256 stored at upload, and faults waiting for the next calls. It outlives simulated crashes.
actor RemoteStore {
    struct Object: Sendable, Equatable {
        var data: Data
        var sha256: String?
        /// The filename it was stored as (what a listing names).
        var name = ""
        /// Changes whenever the object is written: what an ETag tells a resumed download.
        var version = 0
    }

    /// Objects by ``key(_:)`` of their name: keys are bytes, as S3's are (Swift's `==` would merge names
    /// that differ only in their Unicode form).
    private(set) var objects: [String: Object] = [:]

    static func key(_ name: String) -> String { FileName.safeName(name, keepingDots: true) }
    private var faults: [RemoteFault] = []
    private(set) var calls = 0
    private var versions = 0
    /// The object version each partial download (by its destination path) holds the first bytes of, so a
    /// resumed download splices only bytes of one version, as an `If-Range` with the ETag makes sure.
    private var partials: [String: Int] = [:]

    private func put(_ name: String, _ data: Data, sha256: String?) {
        versions += 1
        objects[Self.key(name)] = Object(data: data, sha256: sha256, name: name, version: versions)
    }

    func inject(_ fault: RemoteFault) { faults.append(fault) }
    func clearFaults() { faults.removeAll() }

    /// Stores an object as another device would (no call counted).
    func seed(_ name: String, _ data: Data, sha256: String?) {
        put(name, data, sha256: sha256)
    }

    /// The next fault, if one waits.
    private func takeFault() -> RemoteFault? {
        calls += 1
        return faults.isEmpty ? nil : faults.removeFirst()
    }

    func upload(_ name: String, _ data: Data, sha256: String?) throws {
        if let fault = takeFault() { try Self.fail(fault, name) }
        put(name, data, sha256: sha256)
    }

    /// The bytes a download serves (maybe faulty), and what the server reports about the object.
    func download(_ name: String) throws -> (served: Data, info: RemoteObjectInfo) {
        let fault = takeFault()
        guard let object = objects[Self.key(name)], fault != .notFound else {
            throw AttachmentError(code: .remoteNotFound, message: "no object \(name)", name: name)
        }
        let info = RemoteObjectInfo(size: Int64(object.data.count), sha256: object.sha256)
        switch fault {
        case .truncate:
            return (object.data.prefix(object.data.count / 2), info)
        case .corrupt where !object.data.isEmpty:
            var bytes = object.data
            bytes[bytes.count / 2] ^= 0xFF
            return (bytes, info)
        case .some(let fault) where fault != .corrupt:
            try Self.fail(fault, name)
            return (object.data, info)
        default:
            return (object.data, info)
        }
    }

    /// A download into `destination` that holds the first `offset` bytes of an earlier one: the bytes served
    /// (maybe faulty), what the server reports, and the offset they start at, which is 0 when the object was
    /// written since those first bytes were fetched (the ETag changed: the whole object is served again).
    func download(_ name: String, into destination: String, from offset: Int64) throws -> (
        served: Data, info: RemoteObjectInfo, from: Int64
    ) {
        let (served, info) = try download(name)
        let version = objects[Self.key(name)]?.version ?? 0
        let resumes = offset > 0 && partials[destination] == version
        partials[destination] = version
        return (served, info, resumes ? offset : 0)
    }

    /// Replaces an object only while its bytes have SHA-256 `expected` (a `PUT` with `If-Match`).
    func replace(_ name: String, _ data: Data, sha256: String?, expected: String) throws {
        if let fault = takeFault() { try Self.fail(fault, name) }
        guard let current = objects[Self.key(name)] else {
            throw AttachmentError(code: .remoteNotFound, message: "no object \(name) to replace", name: name)
        }
        guard FileStreaming.sha256(current.data) == expected.lowercased() else {
            throw AttachmentError(code: .conflict, message: "\(name) changed; nothing was replaced", name: name)
        }
        put(name, data, sha256: sha256)
    }

    /// Deletes an object by the key it is stored under (a listed one).
    func deleteStored(_ key: String) throws {
        if let fault = takeFault() { try Self.fail(fault, key) }
        objects[key] = nil
    }

    /// What the server says about an object (a HEAD; no fault applies), or `nil`.
    func info(_ name: String) -> RemoteObjectInfo? {
        objects[Self.key(name)].map { RemoteObjectInfo(size: Int64($0.data.count), sha256: $0.sha256) }
    }

    func delete(_ name: String) throws {
        if let fault = takeFault() { try Self.fail(fault, name) }
        objects[Self.key(name)] = nil
    }

    private static func fail(_ fault: RemoteFault, _ name: String) throws {
        switch fault {
        case .retryAfter(let seconds):
            throw AttachmentError(
                code: .remoteUnavailable, message: "slow down (\(name))", name: name,
                retryAfter: .seconds(seconds))
        case .unavailable, .notFound, .truncate, .corrupt:
            throw AttachmentError(code: .remoteUnavailable, message: "unreachable (\(name))", name: name)
        }
    }
}

/// One simulated process's connection to the store: its calls pass the process's crash switch (a dead
/// process makes no more calls), and what it downloads is written through the process's disk.
struct ModelRemote: RemoteStorageAdapter {
    let store: RemoteStore
    let disk: SimulatedDisk

    func uploadFile(data: Data, attachment: Attachment) async throws {
        try disk.crash.check("remote upload")
        try await store.upload(attachment.filename, data, sha256: attachment.contentHash)
    }

    func downloadFile(attachment: Attachment) async throws -> Data {
        try disk.crash.check("remote download")
        return try await store.download(attachment.filename).served
    }

    func deleteFile(attachment: Attachment) async throws {
        try disk.crash.check("remote delete")
        try await store.delete(attachment.filename)
    }

    var supportsRangedDownloads: Bool { true }

    func downloadFile(
        attachment: Attachment, appendingTo destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws {
        _ = try await downloadFile(attachment: attachment, into: destination, from: offset, progress: progress)
    }

    func downloadFile(
        attachment: Attachment, into destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws -> RemoteObjectInfo {
        try disk.crash.check("remote download")
        // From the offset only while the object is the one those first bytes came from; else from the start.
        let (served, info, from) = try await store.download(
            attachment.filename, into: destination.path, from: offset)
        let start = Int(min(max(from, 0), Int64(served.count)))
        let writer = try disk.openForWriting(atPath: destination.path, at: from > 0 ? from : nil)
        defer { writer.close() }
        // Two chunks, so a crash can fall between them.
        let rest = served[start...]
        let middle = rest.startIndex + rest.count / 2
        try writer.write(Data(rest[..<middle]))
        try writer.write(Data(rest[middle...]))
        try writer.synchronize()
        progress(TransferProgress(completedBytes: Int64(served.count), totalBytes: info.size))
        return info
    }
}
