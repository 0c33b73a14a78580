import AttachmentSync
import AttachmentSyncS3
import Foundation
import Logging

/// The remote of `demo --s3`: a key prefix of its own in a real bucket, through ``S3RemoteStorage``.
///
/// The demo looks at the bucket through the same adapter the queues use: it reads an object by
/// downloading it, and finds the objects it wrote by trying the names of every photo the devices know of,
/// so it needs no permission beyond reading, writing and deleting objects (and creating the bucket when it
/// is missing).
struct DemoS3Remote: DemoRemote {
    /// The adapter both devices use.
    let s3: S3RemoteStorage
    /// Where the objects go.
    let location: String

    /// An adapter for `location`'s bucket, under its prefix followed by `runPrefix`.
    ///
    /// - Parameters:
    ///   - location: The server, bucket and prefix `--s3` named.
    ///   - runPrefix: This run's own key prefix (`attachment-sync-demo-<random>/`), so runs never collide.
    ///   - stateDirectory: Where the adapter keeps the state of multipart uploads.
    ///   - logger: Where the adapter logs, or `nil` to keep it quiet.
    init(location: DemoS3Location, runPrefix: String, stateDirectory: URL, logger: Logger?) throws {
        var configuration = S3RemoteStorage.Configuration(
            endpoint: location.endpoint, region: location.region, bucket: location.bucket,
            credentials: .environment, keyPrefix: location.prefix + runPrefix, addressing: .path)
        configuration.stateDirectory = stateDirectory
        if let logger { configuration.logger = logger }
        s3 = try S3RemoteStorage(configuration: configuration)
        var base = location.endpoint.absoluteString
        while base.hasSuffix("/") { base.removeLast() }
        self.location = "\(base)/\(location.bucket)/\(configuration.keyPrefix)"
    }

    var storage: any RemoteStorageAdapter { s3 }
    var kind: String { "one S3 bucket" }

    /// Creates the bucket, or finds it there already.
    func prepare() async throws {
        do {
            try await s3.createBucket()
        } catch {
            throw DemoFailure(
                "could not create or open bucket \(String(reflecting: s3.configuration.bucket)) at "
                    + "\(s3.configuration.endpoint.absoluteString): \(error)")
        }
    }

    /// Downloads every candidate to learn which exist and their sizes.
    func objects(among filenames: Set<String>) async throws -> [String: Int] {
        var objects: [String: Int] = [:]
        for filename in filenames.sorted() {
            if let data = try await contents(of: filename) { objects[filename] = data.count }
        }
        return objects
    }

    func contents(of filename: String) async throws -> Data? {
        do {
            return try await s3.downloadFile(attachment: Self.attachment(filename))
        } catch let error as AttachmentError where error.code == .remoteNotFound {
            return nil
        }
    }

    /// Deletes the demo's objects (a missing one is fine) unless `keep`, then shuts the adapter's HTTP
    /// client down. Says nothing when the demo wrote nothing (it stopped before the first photo).
    func finish(removing filenames: Set<String>, keep: Bool) async -> String? {
        var line: String?
        if filenames.isEmpty {
            line = nil
        } else if keep {
            line = "kept the objects under \(location)"
        } else {
            var failures: [String] = []
            for filename in filenames.sorted() {
                do {
                    try await s3.deleteFile(attachment: Self.attachment(filename))
                } catch {
                    failures.append("\(filename): \(error)")
                }
            }
            if failures.isEmpty {
                line = "removed the demo's objects under \(location) (pass --keep to keep them)"
            } else {
                line =
                    "could not remove \(failures.count) of the demo's objects under \(location): "
                    + failures.prefix(3).joined(separator: "; ")
            }
        }
        do {
            try await s3.shutdown()
        } catch {
            line = (line.map { $0 + "; " } ?? "") + "shutting the S3 client down failed: \(error)"
        }
        return line
    }

    /// A record that names the object `filename`, for the adapter's calls.
    private static func attachment(_ filename: String) -> Attachment {
        Attachment(id: filename, filename: filename, state: .synced)
    }
}
