import AttachmentSync
import Foundation

/// A folder remote (`FileSystemRemoteStorage`) in a fresh temporary folder, for the tests of what reads a
/// remote's files (`gc`, `verify`, repairs, the garbage collection plan): devices that uploaded to it, and
/// files dated as old as the test needs.
struct FolderRemote: Sendable {
    /// The temporary folder, removed when the last copy of this value is released.
    let folder: TemporaryDirectory
    /// The remote's directory.
    let path: String
    let storage: FileSystemRemoteStorage

    init() throws {
        folder = try TemporaryDirectory()
        path = folder.path("remote")
        storage = FileSystemRemoteStorage(directory: path)
    }

    /// A device (a queue over this remote) that has saved a file per (id, bytes) of `files`, named
    /// `<id>.<fileExtension>`, and uploaded them all (one `syncNow`).
    func device(uploading files: [(String, Data)], fileExtension: String = "bin") async throws -> QueueHarness {
        let device = try QueueHarness(remote: storage)
        for (id, data) in files {
            _ = try await device.queue.saveFile(data: data, mediaType: nil, fileExtension: fileExtension, id: id)
        }
        try await device.queue.syncNow()
        return device
    }

    /// The remote's file of `attachment`.
    func file(of attachment: Attachment) throws -> String {
        try storage.fileURL(for: attachment).path
    }

    /// The remote's file of the attachment `id` that a ``device(uploading:fileExtension:)`` saved.
    func file(ofId id: String, fileExtension: String = "bin") throws -> String {
        try file(of: Attachment(id: id, filename: "\(id).\(fileExtension)", state: .synced))
    }

    /// Uploads `data` as `attachment`'s file, as a device does, and dates it `written`.
    func upload(_ data: Data, as attachment: Attachment, writtenAt written: Date) async throws {
        try await storage.uploadFile(data: data, attachment: attachment)
        try Self.date(try file(of: attachment), written)
    }

    /// Writes `data` into the remote's directory as `name`, as another tool would (under that very name, with
    /// no stored SHA-256), dated `written` when given; returns its path.
    @discardableResult
    func place(_ data: Data, named name: String, writtenAt written: Date? = nil) throws -> String {
        let file = (path as NSString).appendingPathComponent(name)
        try data.write(to: URL(fileURLWithPath: file))
        if let written { try Self.date(file, written) }
        return file
    }

    /// Sets the last modification date of the file at `path`.
    static func date(_ path: String, _ written: Date) throws {
        try FileManager.default.setAttributes([.modificationDate: written], ofItemAtPath: path)
    }
}
