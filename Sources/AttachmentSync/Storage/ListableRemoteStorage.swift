import Foundation

/// Remote storage that can say what it holds: list its files a page at a time, describe one file without
/// downloading it, and delete a listed file by the name it is stored under.
///
/// The queue never needs it. Operating tools do: `attachment-sync verify --remote` checks records against
/// the remote with ``fileInfo(attachment:)``, and `attachment-sync gc` lists the remote and deletes what no
/// database refers to. ``FileSystemRemoteStorage`` conforms, and in `AttachmentSyncS3` the S3 adapter
/// (`ListObjectsV2`, `HEAD`) and the HTTP adapter (WebDAV `PROPFIND`, `HEAD`) do.
///
/// Files an adapter keeps for itself (the stored SHA-256 beside a file, say) are never listed as files;
/// those no file needs any more are ``listLeftovers()``.
///
/// A remote folder or bucket prefix is often shared with other things (a backup, a `readme.txt`, Finder's
/// `.DS_Store`): ``storedSHA256(of:)`` tells a file this library wrote from one it did not, and `gc`
/// deletes only the first kind.
///
/// ```swift
/// var after: String? = nil
/// repeat {
///     let page = try await remote.listFiles(after: after)
///     for file in page.files { print(file.storedName, file.size) }
///     after = page.next
/// } while after != nil
/// ```
public protocol ListableRemoteStorage: RemoteStorageAdapter {
    /// One page of the files the remote holds, in the order of their stored names.
    ///
    /// - Parameter continuation: `nil` for the first page, then the previous page's
    ///   ``RemoteFileListing/next``.
    func listFiles(after continuation: String?) async throws -> RemoteFileListing

    /// The name a file called `filename` is (or would be) stored under, as ``RemoteFile/storedName`` lists
    /// it; match records against a listing with it.
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/invalidName`` when the
    ///   adapter cannot store a file of that name.
    func storedName(forFilename filename: String) throws -> String

    /// Deletes a listed file, and what the adapter keeps beside it; succeeds when it is gone already.
    func deleteListedFile(_ file: RemoteFile) async throws

    /// What the remote holds as the attachment's file, without downloading it: its size and the SHA-256
    /// stored with it at upload (when there is one); `nil` when there is no such file.
    func fileInfo(attachment: Attachment) async throws -> RemoteObjectInfo?

    /// The SHA-256 this library stored with a listed file when it uploaded it, or `nil` when the file
    /// carries none: then the library did not write it (or an old version did, before it stored hashes),
    /// and `gc` (``RemoteGarbageCollection``) never deletes it.
    ///
    /// Every upload of the library's adapters stores the content's SHA-256 with the file: the folder and
    /// HTTP remotes beside it, in `.attachment-sync-sha256-<name>`, S3 on the object, as
    /// `x-amz-meta-sha256`. Other tools write neither. A name alone proves nothing (`readme.txt` is a fine
    /// attachment filename), so the stored hash is the evidence, and the name must also be one the adapter
    /// gives a file (``storedName(forFilename:)``).
    ///
    /// The default asks ``fileInfo(attachment:)`` for the file ``RemoteFile/filename`` names, when that
    /// filename is stored under exactly this name, and returns its SHA-256 when it is well formed (64 hex
    /// digits, lowercased). ``FileSystemRemoteStorage`` reads the stored hash beside the file by its name,
    /// so shortened long names are recognised too. An adapter that stores no hashes proves no file: `gc`
    /// then deletes nothing on it.
    func storedSHA256(of file: RemoteFile) async throws -> String?

    /// The adapter's own files that no file needs any more, as `attachment-sync gc` collects them: the
    /// temporary file of an upload that was interrupted, a stored SHA-256 whose file is gone. Each with its
    /// size and age (an upload in progress has such files too: only old ones are collected).
    ///
    /// The default lists none, for adapters that keep no files of their own beside the remote files.
    /// ``FileSystemRemoteStorage`` lists its interrupted uploads' temporary files and its stored hashes
    /// whose file is gone.
    func listLeftovers() async throws -> [RemoteFile]

    /// Deletes a file ``listLeftovers()`` listed, if it is still a leftover (a stored SHA-256 whose file has
    /// come back is kept); succeeds when it is gone already.
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/invalidName`` for a name
    ///   that is not one of the adapter's own files.
    func deleteLeftover(_ file: RemoteFile) async throws

    /// Whether the place the adapter keeps its files exists: its folder, its bucket (and, under a key
    /// prefix, at least one object: a prefix exists only through its objects), its WebDAV collection.
    ///
    /// Tools ask it before they call any file missing, so that a typo in a bucket, prefix or path reads as
    /// "there is no such place" instead of "every file was lost", and a repair changes nothing. The default
    /// lists the first page (what the adapter throws for a place that does not exist, a missing bucket say,
    /// is thrown): `true` when it holds a file or a leftover. ``FileSystemRemoteStorage`` answers whether
    /// its folder exists.
    func locationExists() async throws -> Bool
}

extension ListableRemoteStorage {
    /// `true` when the first page lists a file, or the adapter lists a leftover.
    public func locationExists() async throws -> Bool {
        if try await !listFiles(after: nil).files.isEmpty { return true }
        return try await !listLeftovers().isEmpty
    }

    /// The SHA-256 ``fileInfo(attachment:)`` reports for the file, when its listed name is the one its
    /// filename is stored under and the hash is well formed; otherwise `nil`.
    public func storedSHA256(of file: RemoteFile) async throws -> String? {
        guard let filename = file.filename, (try? storedName(forFilename: filename)) == file.storedName else {
            return nil
        }
        let info = try await fileInfo(attachment: Attachment(id: filename, filename: filename, state: .archived))
        guard let sha256 = info?.sha256, FileStreaming.isSHA256(sha256) else { return nil }
        return sha256.lowercased()
    }

    /// None: the adapter keeps no files of its own.
    public func listLeftovers() async throws -> [RemoteFile] { [] }

    /// Refuses every name: the adapter lists no leftovers.
    public func deleteLeftover(_ file: RemoteFile) async throws {
        throw AttachmentError(
            code: .invalidName,
            message: "\(String(reflecting: file.storedName)) is not a leftover of \(type(of: self))",
            name: file.storedName)
    }
}

/// A file remote storage holds, as a listing reports it.
public struct RemoteFile: Sendable, Hashable {
    /// The name the file is stored under: what ``ListableRemoteStorage/storedName(forFilename:)`` returns for
    /// the attachment filename it holds (the S3 key without the key prefix, the name in the folder).
    public var storedName: String
    /// The attachment filename the file holds, when the stored name says (`nil` when the adapter cannot map
    /// it back, as for a shortened long name). The default is `nil`.
    public var filename: String?
    /// The file's size in bytes.
    public var size: Int64
    /// When the file was last written, when the remote says. The default is `nil`: unknown.
    public var lastModified: Date?

    /// Describes a listed file.
    public init(storedName: String, filename: String? = nil, size: Int64, lastModified: Date? = nil) {
        self.storedName = storedName
        self.filename = filename
        self.size = size
        self.lastModified = lastModified
    }
}

/// One page of a remote listing.
public struct RemoteFileListing: Sendable, Hashable {
    /// The page's files.
    public var files: [RemoteFile]
    /// What to pass to ``ListableRemoteStorage/listFiles(after:)`` for the next page; `nil` on the last.
    public var next: String?

    /// Creates a page.
    public init(files: [RemoteFile], next: String?) {
        self.files = files
        self.next = next
    }
}

extension ListableRemoteStorage {
    /// Every file the remote holds, page after page, with a bound on the pages so a remote that keeps
    /// returning a continuation cannot loop forever.
    ///
    /// - Parameter maximumPages: The most pages read. The default is 1,000,000.
    /// - Throws: What ``listFiles(after:)`` throws; ``AttachmentError`` with code
    ///   ``AttachmentError/Code-swift.struct/remoteFailure`` when a page repeats the continuation it was
    ///   asked with, or the remote has more than `maximumPages` pages.
    public func allFiles(maximumPages: Int = 1_000_000) async throws -> [RemoteFile] {
        var files: [RemoteFile] = []
        var continuation: String? = nil
        for _ in 0..<maximumPages {
            let page = try await listFiles(after: continuation)
            files += page.files
            guard let next = page.next else { return files }
            guard next != continuation else {
                throw AttachmentError(
                    code: .remoteFailure,
                    message: "\(type(of: self)) listed the same page again (continuation "
                        + "\(String(reflecting: next))); stopped after \(files.count) files")
            }
            continuation = next
        }
        throw AttachmentError(
            code: .remoteFailure,
            message: "\(type(of: self)) has more than \(maximumPages) pages of files; stopped after \(files.count)")
    }
}
