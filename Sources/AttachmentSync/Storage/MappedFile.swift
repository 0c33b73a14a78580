import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A whole file's content as one `Data`, for the default
/// ``RemoteStorageAdapter/uploadFile(fileURL:attachment:progress:)``, which must hand an adapter written for
/// the `Data` API the whole file at once, without holding it in the process's own memory.
///
/// The `Data` is a read-only mapping of the file: its pages are the file's, clean and file-backed, which
/// the system drops under memory pressure and reads again when touched (on iOS they do not count against
/// an app's or an extension's memory limit; on Linux they show as `RssFile`, not `RssAnon`). Four uploads
/// of 200 MB then take a few MiB of the process's memory instead of 800 MB.
///
/// A mapping has one danger: when the file is cut short while mapped, or its volume goes away, touching
/// the bytes past what is left kills the process (`SIGBUS`) where a read would only fail. So a file is
/// mapped only when all of these hold, and read into memory otherwise:
/// - The queue vouches for it (``immutableFile``): an attachment file is written once, under a temporary
///   name, flushed, and renamed or linked into place; afterwards nothing in the library opens it for
///   writing. A download writes under its own staging name and renames it over the old file (which stays
///   whole for a mapping of it), a removal unlinks it (its blocks stay until the mapping goes), and a
///   staging name is unlinked before it is used again, never truncated. Only someone else writing into the
///   attachments folder, which the library owns, could cut it.
/// - It has exactly one name: a second one (`saveFile(fileURL:moveFile: true)` links the caller's file, whose
///   own name is removed after the commit; if that removal failed the caller still reaches the file) would let
///   someone open it and cut it.
/// - It is larger than ``readLimit``; smaller files are simply read.
/// - Its volume is this machine's own fixed storage, and its Data Protection class keeps it readable while
///   the device is locked (``MappingSafety``).
package enum MappedFile {
    /// Files up to this size are read into memory: 1 MiB.
    package static let readLimit = Int64(FileStreaming.chunkSize)

    /// The path of the attachment file the queue is uploading, set around its call of
    /// ``RemoteStorageAdapter/uploadFile(fileURL:attachment:progress:)``: a file the queue owns and never
    /// changes in place (see ``MappedFile``).
    @TaskLocal package static var immutableFile: String?

    /// The file's content: mapped when it is safe (see ``MappedFile``), else read into memory.
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/fileSystem`` when the file
    ///   cannot be read.
    package static func contents(of url: URL) throws -> Data {
        let path = url.path
        if immutableFile == path, let mapped = map(path) { return mapped }
        return try fileSystem(path: path) { try Data(contentsOf: url) }
    }

    /// The file mapped read-only, or `nil` when it must be read instead.
    private static func map(_ path: String) -> Data? {
        guard MappingSafety.isReadableWhileLocked(path) else { return nil }
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        // The mapping keeps the file; the descriptor is not needed once it exists.
        defer { _ = close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, Int(status.st_mode) & Int(S_IFMT) == Int(S_IFREG),
            status.st_nlink == 1, Int64(status.st_size) > readLimit, Int64(status.st_size) <= Int64(Int.max),
            MappingSafety.isOnLocalFixedVolume(descriptor)
        else { return nil }
        let size = Int(status.st_size)
        guard let bytes = mmap(nil, size, PROT_READ, MAP_PRIVATE, descriptor, 0), bytes != MAP_FAILED else {
            return nil
        }
        return Data(bytesNoCopy: bytes, count: size, deallocator: .unmap)
    }
}
