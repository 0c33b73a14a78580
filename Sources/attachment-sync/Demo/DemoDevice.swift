import AttachmentSync
import Foundation
import Logging

/// One simulated device of the demo: its own SQLite file, its own attachments folder and its own
/// ``AttachmentQueue``, sharing the remote folder with the other device.
///
/// The queue follows the photos the device's checklist rows refer to, as an inspection app would.
struct DemoDevice: Sendable {
    /// The app's table and the local-only attachments table, the same on every device.
    static let schema = Schema(tables: [
        Table(name: "checklists", columns: [.text("description"), .integer("completed"), .text("photo_id")]),
        createAttachmentTable(name: "attachments"),
    ])

    /// The query that says which photos the device's rows refer to.
    static let watchedPhotosSQL = "SELECT photo_id FROM checklists WHERE photo_id IS NOT NULL"

    /// The device's short name, `A` or `B`.
    let name: String
    /// The device's folder: `app.sqlite` and `attachments/`.
    let folder: URL
    /// The device's database.
    let db: LocalDatabase
    /// The device's attachment queue.
    let queue: AttachmentQueue

    /// Opens the device's database in `root/device-<name>` and creates its queue (not started yet).
    ///
    /// - Parameters:
    ///   - name: The device's short name.
    ///   - root: The demo's working folder.
    ///   - remote: The remote storage both devices share.
    ///   - syncInterval: The queue's periodic pass interval.
    ///   - syncThrottleDuration: The queue's shortest time between passes triggered by changes.
    ///   - downloadPolicy: Which photos the queue downloads as soon as a row refers to them.
    ///   - bandwidthLimit: The queue's caps on bytes per second, or `nil` for none.
    ///   - network: The queue's network conditions source, or `nil` for an always unrestricted network.
    ///   - logger: Where the library logs, or `nil` to keep it quiet.
    init(
        name: String,
        root: URL,
        remote: any RemoteStorageAdapter,
        syncInterval: Duration,
        syncThrottleDuration: Duration,
        downloadPolicy: DownloadPolicy = .eager,
        bandwidthLimit: BandwidthLimit? = nil,
        network: ManualNetworkConditions? = nil,
        logger: Logger?
    ) throws {
        self.name = name
        folder = root.appendingPathComponent("device-\(name)", isDirectory: true)
        var databaseConfiguration = LocalDatabase.Configuration()
        var configuration = AttachmentQueue.Configuration(
            attachmentsDirectory: folder.appendingPathComponent("attachments", isDirectory: true).path
        )
        configuration.syncInterval = syncInterval
        configuration.syncThrottleDuration = syncThrottleDuration
        configuration.downloadPolicy = downloadPolicy
        configuration.bandwidthLimit = bandwidthLimit
        configuration.networkConditions = network
        if var logger {
            logger[metadataKey: "device"] = "\(name)"
            databaseConfiguration.logger = logger
            configuration.logger = logger
        }
        let db = try LocalDatabase(
            path: folder.appendingPathComponent("app.sqlite").path,
            schema: Self.schema,
            configuration: databaseConfiguration
        )
        self.db = db
        queue = AttachmentQueue(
            db: db,
            remoteStorage: remote,
            configuration: configuration,
            watchAttachments: {
                try db.watch(
                    options: WatchOptions(
                        sql: Self.watchedPhotosSQL,
                        parameters: [],
                        mapper: { cursor in
                            try WatchedAttachmentItem(id: cursor.getString(name: "photo_id"), fileExtension: "jpg")
                        }
                    )
                )
            }
        )
    }

    /// The device's attachments folder.
    var attachmentsDirectory: URL { queue.attachmentsDirectory }

    /// What the device holds right now: its records and the files in its attachments folder.
    func snapshot() async throws -> DemoSnapshot {
        let records = try await queue.allAttachments()
        let files = try DemoSnapshot.regularFiles(in: attachmentsDirectory)
        return DemoSnapshot(records: records, files: files)
    }

    /// Stops the queue and closes the database. Errors are ignored: the demo is ending either way.
    func shutDown() async {
        await queue.close()
        try? await db.close()
    }
}

/// The state of one device (or of the remote folder) at one moment: records by state and files on disk.
struct DemoSnapshot: Sendable {
    /// Every attachment record, or none for the remote folder.
    var records: [Attachment]
    /// The size of every regular file in the folder, by file name.
    var files: [String: Int]

    /// How many records are in `state`.
    func count(_ state: AttachmentState) -> Int {
        records.filter { $0.state == state }.count
    }

    /// The records in `state`.
    func records(in state: AttachmentState) -> [Attachment] {
        records.filter { $0.state == state }
    }

    /// The total size of the files in the folder.
    var bytesOnDisk: Int { files.values.reduce(0, +) }

    /// The size of every regular file directly in `folder`, by name, leaving out the library's own hidden
    /// files (temporary files, the SHA-256 kept beside each remote file); empty when the folder does not exist.
    ///
    /// The queues keep working while the demo looks: a file listed a moment ago (a download's temporary
    /// file, renamed into place meanwhile) may be gone by the time its size is read, and is then skipped.
    static func regularFiles(in folder: URL) throws -> [String: Int] {
        guard FileManager.default.fileExists(atPath: folder.path) else { return [:] }
        var files: [String: Int] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: folder.path)
        where !name.hasPrefix(".attachment-sync-") {
            guard
                let attributes = try? FileManager.default.attributesOfItem(
                    atPath: folder.appendingPathComponent(name).path),
                attributes[.type] as? FileAttributeType == .typeRegular
            else { continue }
            files[name] = (attributes[.size] as? NSNumber)?.intValue ?? 0
        }
        return files
    }
}
