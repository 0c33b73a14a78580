import AttachmentSync
import AttachmentSyncS3
import Foundation
import Logging

/// The remote of `demo --s3`: a key prefix of its own in a real bucket, through ``S3RemoteStorage``, or with
/// `--presigned` through ``PresignedRemoteStorage``: the devices then hold no credentials and get a presigned
/// URL for every request from the demo's in-process backend (a ``PresignedURLIssuer`` for this run's prefix).
///
/// The demo looks at the bucket through the same adapter the queues use: it reads an object by
/// downloading it, and finds the objects it wrote by trying the names of every photo the devices know of,
/// so it needs no permission beyond reading, writing and deleting objects (and creating the bucket when it
/// is missing).
struct DemoS3Remote: DemoRemote {
    /// The backend's adapter, holding the credentials: the devices' adapter without `--presigned`, and the
    /// demo's way of looking at and cleaning up the bucket.
    let s3: S3RemoteStorage
    /// The devices' adapter with `--presigned`: no credentials, every request authorised by the backend.
    let presigned: PresignedRemoteStorage?
    /// How many operations the backend authorised, with `--presigned`.
    let authorizations = LockedValue(0)
    /// Where the objects go, as `verify` and `gc` take a remote: `s3://bucket/prefix/ --endpoint URL`.
    let location: String
    /// The bucket and key prefix alone: `s3://bucket/prefix/`.
    let uri: String

    /// An adapter for `location`'s bucket, under its prefix followed by `runPrefix`.
    ///
    /// - Parameters:
    ///   - location: The server, bucket and prefix `--s3` named.
    ///   - runPrefix: This run's own key prefix (`attachment-sync-demo-<random>/`), so runs never collide.
    ///   - stateDirectory: Where the adapter keeps the state of multipart uploads.
    ///   - presigned: Whether the devices go through presigned URLs from an in-process backend.
    ///   - logger: Where the adapter logs, or `nil` to keep it quiet.
    init(location: DemoS3Location, runPrefix: String, stateDirectory: URL, presigned: Bool, logger: Logger?) throws {
        var configuration = S3RemoteStorage.Configuration(
            endpoint: location.endpoint, region: location.region, bucket: location.bucket,
            credentials: .environment, keyPrefix: location.prefix + runPrefix, addressing: .path)
        configuration.stateDirectory = stateDirectory
        if let logger { configuration.logger = logger }
        s3 = try S3RemoteStorage(configuration: configuration)
        if presigned {
            // The backend: signs URLs for this run's prefix only, up to 1 GiB an object.
            var backend = try PresignedURLIssuer(storage: configuration, maxObjectSize: 1 << 30)
            // The demo's devices are this process's own code and no one else gets its URLs, so the check that
            // upload URLs cannot copy objects in (a shipped backend keeps it, with write-only upload
            // credentials: see "Shipping an app") is off here.
            backend.verifiesConfinement = false
            let issuer = backend
            let counter = authorizations
            var device = PresignedRemoteStorage.Configuration { operation in
                counter.withLock { $0 += 1 }
                return try await issuer.authorize(operation)
            }
            device.stateDirectory = stateDirectory.appendingPathComponent("presigned", isDirectory: true)
            if let logger { device.logger = logger }
            self.presigned = try PresignedRemoteStorage(configuration: device)
        } else {
            self.presigned = nil
        }
        var base = location.endpoint.absoluteString
        while base.hasSuffix("/") { base.removeLast() }
        uri = "s3://\(location.bucket)/\(configuration.keyPrefix)"
        self.location = "\(uri) --endpoint \(base)"
    }

    var storage: any RemoteStorageAdapter { presigned ?? s3 }
    var kind: String {
        presigned == nil
            ? "one S3 bucket"
            : "one S3 bucket through presigned URLs (the devices hold no credentials; the demo plays the backend)"
    }

    /// Creates the bucket, or finds it there already.
    func prepare() async throws {
        do {
            try await s3.createBucket()
        } catch {
            throw DemoFailure(
                "could not create or open bucket \(String(reflecting: s3.configuration.bucket)) at "
                    + "\(s3.configuration.endpoint.absoluteString): \(ErrorText.describe(error))")
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
    ///
    /// The objects are those `filenames` name and whatever else the listing of this run's own key prefix
    /// shows (an upload that finished as the demo was interrupted): the prefix is this run's alone.
    func finish(removing filenames: Set<String>, keep: Bool) async -> String? {
        var line: String?
        var names = filenames
        var failures: [String] = []
        if !keep {
            do {
                names.formUnion(try await s3.allFiles().map(\.storedName))
            } catch  where !filenames.isEmpty {
                // With no photo saved, the bucket was likely never reached (the demo said why already).
                failures.append("listing \(uri): \(ErrorText.describe(error))")
            } catch {}
        }
        if names.isEmpty && failures.isEmpty {
            line = nil
        } else if keep {
            line = "kept the objects under \(location) (the remote to give verify and gc)"
        } else {
            for filename in names.sorted() {
                do {
                    try await s3.deleteFile(attachment: Self.attachment(filename))
                } catch {
                    failures.append("\(filename): \(ErrorText.describe(error))")
                }
            }
            if failures.isEmpty {
                line = "removed the demo's objects under \(uri) (pass --keep to keep them)"
            } else {
                line =
                    "could not remove \(failures.count) of the demo's objects under \(uri): "
                    + failures.prefix(3).joined(separator: "; ")
            }
        }
        if let presigned {
            let count = authorizations.withLock { $0 }
            line = (line.map { $0 + "\n" } ?? "") + "the backend authorised \(count) requests with presigned URLs"
            try? await presigned.shutdown()
        }
        do {
            try await s3.shutdown()
        } catch {
            line = (line.map { $0 + "; " } ?? "") + "shutting the S3 client down failed: \(ErrorText.describe(error))"
        }
        return line
    }

    /// A record that names the object `filename`, for the adapter's calls.
    private static func attachment(_ filename: String) -> Attachment {
        Attachment(id: filename, filename: filename, state: .synced)
    }
}
