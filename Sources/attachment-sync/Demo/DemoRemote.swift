import AttachmentSync
import Foundation

/// The remote storage the demo's two devices share, and what the demo needs to look at it past the queues:
/// which objects it holds, their bytes, and cleaning up at the end.
///
/// The queues only ever see ``storage``; the other members are how the demo checks their work.
protocol DemoRemote: Sendable {
    /// The adapter both devices' queues use.
    var storage: any RemoteStorageAdapter { get }
    /// What the devices share, for the headline: `one remote folder` or `one S3 bucket`.
    var kind: String { get }
    /// Where the objects are, for the layout lines: a folder name or an S3 URL with the key prefix.
    var location: String { get }

    /// Gets the remote ready for the devices (creates the bucket when it is missing).
    func prepare() async throws

    /// The objects the remote holds, with their sizes, by file name. `filenames` are the names of every
    /// file the demo may have written; a remote that cannot list itself looks for these.
    func objects(among filenames: Set<String>) async throws -> [String: Int]

    /// The bytes of the object named `filename`, or `nil` when the remote does not hold it.
    func contents(of filename: String) async throws -> Data?

    /// Removes the objects named `filenames` unless `keep` is true, and releases what the remote holds on to
    /// (connections); returns a line saying what happened, or `nil` when there is nothing to say (the
    /// folder goes with the working folder).
    func finish(removing filenames: Set<String>, keep: Bool) async -> String?
}

extension DemoRemote {
    /// Whether the remote holds an object named `filename`.
    func exists(_ filename: String) async throws -> Bool {
        try await contents(of: filename) != nil
    }
}

/// The default remote: a folder inside the demo's working folder, shared through ``FileSystemRemoteStorage``.
struct DemoFolderRemote: DemoRemote {
    /// The folder's adapter.
    let folder: FileSystemRemoteStorage

    /// A remote in `directory`, created on the first upload.
    init(directory: URL) {
        folder = FileSystemRemoteStorage(directory: directory.path)
    }

    var storage: any RemoteStorageAdapter { folder }
    var kind: String { "one remote folder" }
    var location: String { "\(folder.directory.lastPathComponent)/" }

    func prepare() async throws {}

    func objects(among filenames: Set<String>) async throws -> [String: Int] {
        try DemoSnapshot.regularFiles(in: folder.directory)
    }

    func contents(of filename: String) async throws -> Data? {
        try? Data(contentsOf: folder.directory.appendingPathComponent(filename))
    }

    func finish(removing filenames: Set<String>, keep: Bool) async -> String? {
        nil
    }
}
