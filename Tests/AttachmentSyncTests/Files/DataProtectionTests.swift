import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// The real file system, with a log of the attributes set on each path (Data Protection class, backup
/// exclusion). On Linux setting them changes nothing on disk, so the log is what shows the queue asked.
final class AttributeLoggingDisk: ForwardingDisk, Sendable {
    let base = SystemFileOperations()
    let log = LockedValue<[(path: String, attributes: LocalFileAttributes)]>([])

    /// The attributes set on paths whose last component is `name`, in order.
    func attributes(ofName name: String) -> [LocalFileAttributes] {
        log.withLock { $0 }.filter { ($0.path as NSString).lastPathComponent == name }.map(\.attributes)
    }

    func attributes(ofPath path: String) -> [LocalFileAttributes] {
        log.withLock { $0 }.filter { $0.path == path }.map(\.attributes)
    }

    var all: [(path: String, attributes: LocalFileAttributes)] { log.withLock { $0 } }

    func setAttributes(_ attributes: LocalFileAttributes, atPath path: String) throws {
        log.withLock { $0.append((path, attributes)) }
        try base.setAttributes(attributes, atPath: path)
    }

    func synchronizeFiles(atPaths paths: [String]) throws { try base.synchronizeFiles(atPaths: paths) }
}

@Suite("Data Protection and backups: which files get what", .cleansUp)
struct DataProtectionTests {
    @Test("the defaults: complete until first user authentication, downloads excluded from backups")
    func defaults() {
        let configuration = AttachmentQueue.Configuration(attachmentsDirectory: "/tmp/attachments")
        #expect(configuration.fileProtection == .completeUntilFirstUserAuthentication)
        #expect(configuration.excludesDownloadsFromBackup)
    }

    @Test(
        "content saved on this device is never excluded from backups; downloads are exactly when asked",
        arguments: FileProtection.allCases, [true, false])
    func backupDecision(protection: FileProtection, excludesDownloads: Bool) {
        let policy = LocalFilePolicy(protection: protection, excludesDownloadsFromBackup: excludesDownloads)
        for kind in LocalFilePolicy.Kind.allCases {
            #expect(policy.attributes(for: kind).protection == protection, "\(kind)")
        }
        // Waiting for upload or uploaded, it is the user's own content: never excluded, whatever the option.
        #expect(policy.attributes(for: .savedContent).excludedFromBackup != true)
        // A file handed over with moveFile brings its own attribute along: cleared, so it is backed up.
        #expect(policy.attributes(for: .adoptedFile).excludedFromBackup == false)
        #expect(policy.attributes(for: .folder).excludedFromBackup == nil, "a folder's exclusion covers uploads")
        #expect(policy.attributes(for: .download).excludedFromBackup == (excludesDownloads ? true : nil))
    }

    @Test("the class reaches the attachments directory, its subdirectories and saved files; no upload is excluded")
    func savedFilesAndFolders() async throws {
        let disk = AttributeLoggingDisk()
        let device = try QueueHarness(localStorage: FileManagerStorageAdapter(files: disk)) {
            $0.files = disk
            $0.subdirectories = ["thumbnails"]
            $0.fileProtection = .complete
        }
        try await device.queue.waitForInit()
        let folder = LocalFileAttributes(protection: .complete)
        #expect(disk.attributes(ofPath: device.attachmentsPath) == [folder])
        #expect(
            disk.attributes(ofPath: (device.attachmentsPath as NSString).appendingPathComponent("thumbnails")) == [
                folder
            ])

        let saved = try await device.queue.saveFile(
            data: testBytes(1000), mediaType: "image/jpeg", fileExtension: "jpg", id: "photo"
        ) { _, _ in }
        let localName = try #require(saved.localUri.map { ($0 as NSString).lastPathComponent })
        // Set on the staged file, the same file (a hard link) that is then the attachment's.
        #expect(
            disk.attributes(ofName: FileName.savingName(for: localName)) == [LocalFileAttributes(protection: .complete)]
        )

        let source = device.folder.url.appendingPathComponent("clip.mov")
        try testBytes(2000, seed: 2).write(to: source)
        let moved = try await device.queue.saveFile(fileURL: source, mediaType: nil, id: "clip", moveFile: true)
        let movedName = try #require(moved.localUri.map { ($0 as NSString).lastPathComponent })
        #expect(
            disk.attributes(ofName: FileName.savingName(for: movedName))
                == [LocalFileAttributes(protection: .complete, excludedFromBackup: false)])

        #expect(!disk.all.contains { $0.attributes.excludedFromBackup == true }, "\(disk.all)")
    }

    @Test("a download gets the class and, with the option on, is excluded from backups before it is placed")
    func downloads() async throws {
        for excluded in [true, false] {
            let disk = AttributeLoggingDisk()
            let remote = InMemoryRemoteStorage()
            let content = testBytes(5000, seed: 3)
            await remote.setFile(content, named: "p1.bin")
            let device = try QueueHarness(
                remote: remote, localStorage: FileManagerStorageAdapter(files: disk),
                customWatch: fixedWatch([try WatchedAttachmentItem(id: "p1", fileExtension: "bin")])
            ) {
                $0.files = disk
                $0.excludesDownloadsFromBackup = excluded
            }
            try await device.queue.startSync()
            try await device.waitForState("p1", .synced)
            #expect(device.bytesOnDisk("p1.bin") == content)
            #expect(
                disk.attributes(ofName: FileName.downloadingName(for: "p1.bin"))
                    == [
                        LocalFileAttributes(
                            protection: .completeUntilFirstUserAuthentication,
                            excludedFromBackup: excluded ? true : nil)
                    ], "excluded: \(excluded)")
        }
    }
}
