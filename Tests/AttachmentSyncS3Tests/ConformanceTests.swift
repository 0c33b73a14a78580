import AttachmentSync
import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// The adapter conformance suite of AttachmentSyncTesting, run against every adapter of the library.
@Suite("Remote storage conformance")
struct ConformanceTests {
    /// The library's adapters all keep each file's SHA-256 and return it.
    static var strict: RemoteStorageConformance.Options {
        var options = RemoteStorageConformance.Options()
        options.requiresStoredHash = true
        return options
    }

    @Test("InMemoryRemoteStorage keeps the adapter contract")
    func inMemoryConforms() async throws {
        let storage = InMemoryRemoteStorage()
        try await RemoteStorageConformance(adapter: storage, options: Self.strict).run()
        #expect(await storage.files.isEmpty, "the suite deletes what it uploads")
        await storage.setCreateOnly(true)
        var createOnly = Self.strict
        createOnly.requiresCreateOnly = true
        try await RemoteStorageConformance(adapter: storage, options: createOnly).run()
    }

    @Test("FileSystemRemoteStorage keeps the adapter contract")
    func fileSystemConforms() async throws {
        try await withTemporaryDirectory { directory in
            var options = Self.strict
            options.requiresCreateOnly = true
            try await RemoteStorageConformance(
                adapter: FileSystemRemoteStorage(directory: directory), options: options
            ).run()
        }
    }

    @Test(
        "S3RemoteStorage on Ceph keeps the adapter contract, multipart uploads included",
        arguments: TestTransport.allCases)
    func s3Conforms(_ transport: TestTransport) async throws {
        let configure: (inout S3RemoteStorage.Configuration) -> Void = {
            $0.multipartThreshold = 5 * 1024 * 1024
            $0.partSize = 5 * 1024 * 1024
            $0.keyPrefix = "conformance/"
        }
        try await S3TestBucket.with("conformance", transport: transport, configure: configure) { storage, _ in
            var options = Self.strict
            options.requiresCreateOnly = true
            try await RemoteStorageConformance(adapter: storage, options: options).run()
            #expect(try await storage.listKeys().isEmpty, "the suite deletes what it uploads")
        }
    }

    @Test(
        "HTTPRemoteStorage on nginx keeps the adapter contract, with and without a bearer token",
        arguments: TestTransport.allCases)
    func httpConforms(_ transport: TestTransport) async throws {
        for authenticated in [false, true] {
            try await WebDAVTestFolder.with(authenticated: authenticated, transport: transport) { storage, _ in
                var options = Self.strict
                options.requiresCreateOnly = true
                try await RemoteStorageConformance(adapter: storage, options: options).run()
            }
        }
    }

    @Test("a violation names the check and says what went wrong")
    func violationsAreDescriptive() async throws {
        let storage = InMemoryRemoteStorage()
        await storage.setAlwaysFailing(.delete, with: InjectedFailure("delete refused"))
        let failure = await #expect(throws: RemoteStorageConformance.Failure.self) {
            try await RemoteStorageConformance(adapter: storage).run([.roundTripSmall, .idempotentDelete])
        }
        #expect(failure?.check == .idempotentDelete)
        #expect(failure?.description.contains("delete") == true)
        #expect(failure?.underlying as? InjectedFailure == InjectedFailure("delete refused"))
    }

    @Test("an adapter whose ranged reads append the wrong bytes fails the rangedRead check")
    func brokenRangedReadIsCaught() async throws {
        let failure = await #expect(throws: RemoteStorageConformance.Failure.self) {
            try await RemoteStorageConformance(adapter: RepeatingRangedStorage()).run([.rangedRead])
        }
        #expect(failure?.check == .rangedRead)
    }

    @Test("an adapter that resumes a replaced file by splicing, and reports no hash, fails resumeAfterReplacement")
    func splicingResumeIsCaught() async throws {
        let failure = await #expect(throws: RemoteStorageConformance.Failure.self) {
            try await RemoteStorageConformance(adapter: SplicingStorage()).run([.resumeAfterReplacement])
        }
        #expect(failure?.check == .resumeAfterReplacement)
        #expect(failure?.message.contains("replaced") == true)
    }

    @Test("an adapter that reports a wrong size or no hash when one is required fails objectInfo")
    func wrongObjectInfoIsCaught() async throws {
        let wrong = await #expect(throws: RemoteStorageConformance.Failure.self) {
            try await RemoteStorageConformance(adapter: SplicingStorage(reportedSize: 3)).run([.objectInfo])
        }
        #expect(wrong?.check == .objectInfo)
        #expect(wrong?.message.contains("3 bytes") == true)
        let missing = await #expect(throws: RemoteStorageConformance.Failure.self) {
            try await RemoteStorageConformance(adapter: SplicingStorage(), options: Self.strict).run([.objectInfo])
        }
        #expect(missing?.message.contains("no SHA-256") == true)
    }

    @Test("a listing that keeps deleted files, or lists the adapter's own files, fails the listing check")
    func brokenListingIsCaught() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("listing-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        for flaw in [ForgetfulListingStorage.Flaw.deleteDoesNothing, .listsHashFiles] {
            let storage = ForgetfulListingStorage(folder: FileSystemRemoteStorage(directory: folder), flaw: flaw)
            let failure = await #expect(throws: RemoteStorageConformance.Failure.self) {
                try await RemoteStorageConformance(adapter: storage).run([.listing])
            }
            #expect(failure?.check == .listing)
            let expected = flaw == .deleteDoesNothing ? "is still listed" : "a file the adapter keeps for itself"
            #expect(failure?.message.contains(expected) == true, "\(String(describing: failure))")
        }
    }

    @Test("an adapter whose missing files are not remoteNotFound fails the notFound check")
    func wrongNotFoundErrorIsCaught() async throws {
        let failure = await #expect(throws: RemoteStorageConformance.Failure.self) {
            try await RemoteStorageConformance(adapter: VagueStorage()).run([.notFound])
        }
        #expect(failure?.check == .notFound)
        #expect(failure?.message.contains("remoteNotFound") == true)
    }
}

/// An adapter that claims ranged reads but appends the whole file again.
private struct RepeatingRangedStorage: RemoteStorageAdapter {
    let storage = InMemoryRemoteStorage()

    func uploadFile(data: Data, attachment: AttachmentSync.Attachment) async throws {
        try await storage.uploadFile(data: data, attachment: attachment)
    }

    func downloadFile(attachment: AttachmentSync.Attachment) async throws -> Data {
        try await storage.downloadFile(attachment: attachment)
    }

    func deleteFile(attachment: AttachmentSync.Attachment) async throws {
        try await storage.deleteFile(attachment: attachment)
    }

    var supportsRangedDownloads: Bool { true }

    func downloadFile(
        attachment: AttachmentSync.Attachment, appendingTo destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws {
        let data = try await storage.downloadFile(attachment: attachment)
        let handle = try FileHandle(forWritingTo: destination)
        defer { try? handle.close() }
        try handle.seekToEnd()
        try handle.write(contentsOf: data)
    }
}

/// An adapter with ranged reads that trust whatever the destination holds (appending the rest of the current
/// file to it), stores no hash, and reports the size it is told to.
private struct SplicingStorage: RemoteStorageAdapter {
    let storage = InMemoryRemoteStorage()
    var reportedSize: Int64?

    func uploadFile(data: Data, attachment: AttachmentSync.Attachment) async throws {
        try await storage.uploadFile(data: data, attachment: attachment)
    }

    func downloadFile(attachment: AttachmentSync.Attachment) async throws -> Data {
        try await storage.downloadFile(attachment: attachment)
    }

    func deleteFile(attachment: AttachmentSync.Attachment) async throws {
        try await storage.deleteFile(attachment: attachment)
    }

    var supportsRangedDownloads: Bool { true }

    func downloadFile(
        attachment: AttachmentSync.Attachment, into destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws -> RemoteObjectInfo {
        let data = try await storage.downloadFile(attachment: attachment)
        if offset == 0 {
            try data.write(to: destination)
        } else {
            let handle = try FileHandle(forWritingTo: destination)
            defer { try? handle.close() }
            try handle.truncate(atOffset: UInt64(offset))
            try handle.write(contentsOf: data.dropFirst(Int(offset)))
        }
        return RemoteObjectInfo(size: reportedSize)
    }
}

/// An adapter that throws a plain error for a missing file.
private struct VagueStorage: RemoteStorageAdapter {
    func uploadFile(data: Data, attachment: AttachmentSync.Attachment) async throws {}

    func downloadFile(attachment: AttachmentSync.Attachment) async throws -> Data {
        throw URLError(.fileDoesNotExist)
    }

    func deleteFile(attachment: AttachmentSync.Attachment) async throws {}
}

/// A folder remote whose listing has one flaw: deleting a listed file does nothing, or the stored hashes are
/// listed too.
private struct ForgetfulListingStorage: ListableRemoteStorage {
    enum Flaw { case deleteDoesNothing, listsHashFiles }

    let folder: FileSystemRemoteStorage
    let flaw: Flaw

    func uploadFile(data: Data, attachment: AttachmentSync.Attachment) async throws {
        try await folder.uploadFile(data: data, attachment: attachment)
    }

    func downloadFile(attachment: AttachmentSync.Attachment) async throws -> Data {
        try await folder.downloadFile(attachment: attachment)
    }

    func deleteFile(attachment: AttachmentSync.Attachment) async throws {
        try await folder.deleteFile(attachment: attachment)
    }

    func listFiles(after continuation: String?) async throws -> RemoteFileListing {
        var listing = try await folder.listFiles(after: continuation)
        if flaw == .listsHashFiles {
            let names = try FileManager.default.contentsOfDirectory(atPath: folder.directory.path)
            for name in names where name.hasPrefix(".attachment-sync-sha256-") {
                listing.files.append(RemoteFile(storedName: name, size: 64))
            }
        }
        return listing
    }

    func storedName(forFilename filename: String) throws -> String {
        try folder.storedName(forFilename: filename)
    }

    func deleteListedFile(_ file: RemoteFile) async throws {
        if flaw == .deleteDoesNothing { return }
        try await folder.deleteListedFile(file)
    }

    func fileInfo(attachment: AttachmentSync.Attachment) async throws -> RemoteObjectInfo? {
        try await folder.fileInfo(attachment: attachment)
    }
}
