import AttachmentSync
import Crypto
import Foundation

/// What is known about one multipart upload in progress, persisted as a small JSON file so a restarted
/// upload continues with the missing parts.
struct MultipartUploadState: Codable, Sendable, Equatable {
    /// A part the server has stored.
    struct Part: Codable, Sendable, Equatable {
        var partNumber: Int
        var etag: String
    }

    var bucket: String
    var key: String
    /// The file's size and modification time when the upload started: a different file under the same key
    /// starts a new upload.
    var fileSize: Int64
    var fileModificationTime: Double
    var partSize: Int64
    var uploadId: String
    var createdAt: Date
    var parts: [Part]
    /// The whole file's SHA-256, stored with the object at creation (`nil` in states saved before it was
    /// kept here).
    var sha256: String?
}

/// The folder of multipart upload states: one JSON file per upload, named after the bucket, the object key
/// and the file's size. Files are replaced atomically.
struct MultipartUploadStore: Sendable {
    let directory: URL

    /// The state file for an upload of a file of `fileSize` bytes to `key` in `bucket`.
    func fileURL(bucket: String, key: String, fileSize: Int64) -> URL {
        let name = SigV4Signer.hex(SHA256.hash(data: Data("\(bucket)\n\(key)\n\(fileSize)".utf8)))
        return directory.appendingPathComponent("\(name).json")
    }

    func load(bucket: String, key: String, fileSize: Int64) -> MultipartUploadState? {
        let url = fileURL(bucket: bucket, key: key, fileSize: fileSize)
        guard let data = try? Data(contentsOf: url) else { return nil }
        guard let state = try? Self.decoder.decode(MultipartUploadState.self, from: data),
            state.bucket == bucket, state.key == key, state.fileSize == fileSize
        else {
            try? FileManager.default.removeItem(at: url)
            return nil
        }
        return state
    }

    func save(_ state: MultipartUploadState) throws {
        let url = fileURL(bucket: state.bucket, key: state.key, fileSize: state.fileSize)
        try fileSystem(path: url.path) {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try Self.encoder.encode(state).write(to: url, options: .atomic)
        }
    }

    func remove(bucket: String, key: String, fileSize: Int64) {
        try? FileManager.default.removeItem(at: fileURL(bucket: bucket, key: key, fileSize: fileSize))
    }

    /// Every readable state in the folder.
    func all() -> [MultipartUploadState] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return names.filter { $0.hasSuffix(".json") }.compactMap { name in
            (try? Data(contentsOf: directory.appendingPathComponent(name)))
                .flatMap { try? Self.decoder.decode(MultipartUploadState.self, from: $0) }
        }
    }

    private static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }

    private static var decoder: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }
}

/// The parts of one upload completed so far, saved after each one. An actor, because parts finish
/// concurrently.
actor MultipartUploadSession {
    private(set) var state: MultipartUploadState
    private let store: MultipartUploadStore

    init(state: MultipartUploadState, store: MultipartUploadStore) {
        self.state = state
        self.store = store
    }

    /// Records a completed part and saves the state.
    func record(_ part: MultipartUploadState.Part) throws {
        state.parts.removeAll { $0.partNumber == part.partNumber }
        state.parts.append(part)
        state.parts.sort { $0.partNumber < $1.partNumber }
        try store.save(state)
    }
}
