import AttachmentSync
import Foundation

/// A listable remote of many generated files (millions, if need be) that takes no memory per file: for
/// tests and benchmarks of what lists whole buckets, such as `RemoteGarbageCollector`.
///
/// File `i` (from 0) is named ``name(_:)`` (`file-000000042.bin`), so names sort as their indexes do, and
/// described by the closure given (size, age, stored SHA-256). Only deletes are remembered. Listing,
/// describing and deleting can be made to fail once, to interrupt what runs on it. It holds no content:
/// uploads are refused and downloads write the file's size in zero bytes.
///
/// ```swift
/// let remote = GeneratedRemoteStorage(count: 1_000_000) { index in
///     .init(size: 1_024, lastModified: .distantPast, sha256: String(repeating: "a", count: 64))
/// }
/// ```
public final class GeneratedRemoteStorage: ListableRemoteStorage {
    /// What a generated file is.
    public struct File: Sendable, Hashable {
        /// Its size in bytes.
        public var size: Int64
        /// When it was last written; `nil` for unknown.
        public var lastModified: Date?
        /// The SHA-256 stored with it (what the library's uploads store); `nil` for a file another tool wrote.
        public var sha256: String?

        /// Describes a generated file.
        public init(size: Int64, lastModified: Date?, sha256: String?) {
            self.size = size
            self.lastModified = lastModified
            self.sha256 = sha256
        }
    }

    /// The calls made, and the failures waiting.
    private struct State {
        var deleted = Set<Int>()
        var listCalls = 0
        var describeCalls = 0
        var deleteCalls = 0
        var failListingAt: Int?
        var failDescribeAt: Int?
        var failDeleteAt: Int?
    }

    /// How many files are generated (deleted ones included).
    public let count: Int
    /// How many files a page lists.
    public let pageSize: Int
    private let describe: @Sendable (Int) -> File
    private let state = LockedValue(State())

    /// A remote of `count` files, `pageSize` to a page, each described by `file`.
    public init(count: Int, pageSize: Int = 1_000, file: @escaping @Sendable (Int) -> File) {
        self.count = max(0, count)
        self.pageSize = max(1, pageSize)
        describe = file
    }

    /// The name of file `index`.
    public static func name(_ index: Int) -> String {
        let digits = String(index)
        return "file-" + String(repeating: "0", count: max(0, 9 - digits.count)) + digits + ".bin"
    }

    /// The index a name of ``name(_:)`` has, or `nil` for another name.
    public static func index(of name: String) -> Int? {
        guard name.hasPrefix("file-"), name.hasSuffix(".bin") else { return nil }
        let digits = name.dropFirst(5).dropLast(4)
        guard digits.count == 9, digits.allSatisfy(\.isASCII) else { return nil }
        return Int(digits)
    }

    /// The names of the files deleted, in order.
    public var deletedNames: [String] { state.withLock { $0.deleted.sorted().map(Self.name) } }
    /// How many pages were asked for.
    public var listCalls: Int { state.withLock { $0.listCalls } }
    /// How many deletes were asked for (refused ones included).
    public var deleteCalls: Int { state.withLock { $0.deleteCalls } }
    /// How many files were described by ``fileInfo(attachment:)`` (refused ones included).
    public var describeCalls: Int { state.withLock { $0.describeCalls } }

    /// Makes the ``fileInfo(attachment:)`` call after the next `describes` ones throw ``InjectedFailure``,
    /// once.
    public func failDescribe(afterDescribes describes: Int) {
        state.withLock { $0.failDescribeAt = $0.describeCalls + max(0, describes) }
    }

    /// Makes the listing call after the next `pages` ones throw ``InjectedFailure``, once.
    public func failListing(afterPages pages: Int) {
        state.withLock { $0.failListingAt = $0.listCalls + max(0, pages) }
    }

    /// Makes the delete after the next `deletes` ones throw ``InjectedFailure``, once.
    public func failDelete(afterDeletes deletes: Int) {
        state.withLock { $0.failDeleteAt = $0.deleteCalls + max(0, deletes) }
    }

    /// A page of the files not deleted; the continuation is the next index.
    public func listFiles(after continuation: String?) async throws -> RemoteFileListing {
        let start = try state.withLock { state -> Int in
            defer { state.listCalls += 1 }
            if state.failListingAt == state.listCalls {
                state.failListingAt = nil
                throw InjectedFailure("listing failed")
            }
            guard let continuation else { return 0 }
            guard let index = Int(continuation), index >= 0 else {
                throw AttachmentError(
                    code: .remoteFailure,
                    message: "\(String(reflecting: continuation)) is not a continuation of this listing")
            }
            return index
        }
        let end = min(count, start + pageSize)
        let deleted = state.withLock { $0.deleted }
        var files: [RemoteFile] = []
        files.reserveCapacity(max(0, end - start))
        for index in start..<max(start, end) where !deleted.contains(index) {
            let file = describe(index)
            let name = Self.name(index)
            files.append(RemoteFile(storedName: name, filename: name, size: file.size, lastModified: file.lastModified))
        }
        return RemoteFileListing(files: files, next: end < count ? String(end) : nil)
    }

    /// The filename itself.
    public func storedName(forFilename filename: String) throws -> String { filename }

    /// Remembers the file as deleted.
    public func deleteListedFile(_ file: RemoteFile) async throws {
        try state.withLock { state in
            defer { state.deleteCalls += 1 }
            if state.failDeleteAt == state.deleteCalls {
                state.failDeleteAt = nil
                throw InjectedFailure("delete failed")
            }
            if let index = Self.index(of: file.storedName) { state.deleted.insert(index) }
        }
    }

    /// The generated file's size and stored SHA-256, unless it was deleted or is not one.
    public func fileInfo(attachment: Attachment) async throws -> RemoteObjectInfo? {
        guard let index = Self.index(of: attachment.filename), index < count else { return nil }
        guard
            try !state.withLock({ state in
                if state.failDescribeAt == state.describeCalls {
                    state.failDescribeAt = nil
                    state.describeCalls += 1
                    throw InjectedFailure("describe failed")
                }
                state.describeCalls += 1
                return state.deleted.contains(index)
            })
        else { return nil }
        let file = describe(index)
        return RemoteObjectInfo(size: file.size, sha256: file.sha256)
    }

    /// Refused: the remote holds generated files only.
    public func uploadFile(data: Data, attachment: Attachment) async throws {
        throw AttachmentError(
            code: .unsupported, message: "GeneratedRemoteStorage holds generated files only and takes no upload")
    }

    /// The file's size in zero bytes.
    public func downloadFile(attachment: Attachment) async throws -> Data {
        guard let info = try await fileInfo(attachment: attachment) else {
            throw AttachmentError(code: .remoteNotFound, message: "no file \(String(reflecting: attachment.filename))")
        }
        return Data(count: Int(clamping: info.size ?? 0))
    }

    /// Remembers the file as deleted.
    public func deleteFile(attachment: Attachment) async throws {
        try await deleteListedFile(RemoteFile(storedName: attachment.filename, size: 0))
    }
}
