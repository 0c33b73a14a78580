/// Decides how the attachments table follows the app's rows: given the watched items and the current
/// records, which records to create, restore, re-queue or archive. A plain value with no I/O.
struct Reconciler: Sendable {
    /// Whether new watched attachments are downloaded (created as `queuedDownload`).
    var downloadAttachments: Bool

    struct Decision: Equatable, Sendable {
        /// New records to insert, in `queuedDownload`.
        var inserts: [AttachmentRecord] = []
        /// Archived records whose local file is still cached: back to `synced`, no download.
        var restores: [String] = []
        /// Archived records without a local file: back to `queuedDownload`, with the item's metadata.
        var requeues: [AttachmentRecord] = []
        /// Records no row refers to any more, with the state they were seen in.
        var archives: [(id: String, from: AttachmentState)] = []
        /// Items whose names cannot reach the file system, with why.
        var rejected: [(item: WatchedAttachmentItem, error: AttachmentError)] = []

        var isEmpty: Bool {
            inserts.isEmpty && restores.isEmpty && requeues.isEmpty && archives.isEmpty
        }

        static func == (lhs: Decision, rhs: Decision) -> Bool {
            lhs.inserts == rhs.inserts && lhs.restores == rhs.restores && lhs.requeues == rhs.requeues
                && lhs.archives.map(\.id) == rhs.archives.map(\.id)
                && lhs.archives.map(\.from) == rhs.archives.map(\.from)
                && lhs.rejected.map(\.item) == rhs.rejected.map(\.item)
        }
    }

    /// Compares `items` (one emission of the app's watch) with `records` (the whole table).
    ///
    /// - A new id becomes a `queuedDownload` record (named by the item's filename, else `<id>.<ext>`, with
    ///   its media type and metadata), unless downloads are off.
    /// - An archived id that is watched again is restored: to `synced` when its file is still cached, else
    ///   back to `queuedDownload`.
    /// - A `synced` or `queuedDownload` record whose id is no longer watched is archived. Records waiting
    ///   for upload or delete are left alone: their transfer must finish first.
    func reconcile(items: [WatchedAttachmentItem], records: [String: AttachmentRecord]) -> Decision {
        var decision = Decision()
        var watched: Set<String> = []
        for item in items where watched.insert(item.id).inserted {
            guard let record = records[item.id] else {
                guard downloadAttachments else { continue }
                do {
                    decision.inserts.append(try Self.newRecord(for: item))
                } catch let error as AttachmentError {
                    decision.rejected.append((item, error))
                } catch {
                    decision.rejected.append(
                        (item, AttachmentError(code: .invalidName, message: "\(error)", attachmentId: item.id)))
                }
                continue
            }
            guard record.state == .archived else { continue }
            if record.localPath != nil {
                decision.restores.append(record.id)
            } else if downloadAttachments {
                var requeued = record
                requeued.state = .queuedDownload
                requeued.metaData = item.metaData ?? record.metaData
                requeued.mediaType = item.mediaType ?? record.mediaType
                decision.requeues.append(requeued)
            }
        }
        for record in records.values.sorted(by: { ($0.timestamp, $0.id) < ($1.timestamp, $1.id) })
        where !watched.contains(record.id) && (record.state == .synced || record.state == .queuedDownload) {
            decision.archives.append((record.id, record.state))
        }
        return decision
    }

    /// The `queuedDownload` record for a newly watched item, after checking every name it brings.
    static func newRecord(for item: WatchedAttachmentItem) throws -> AttachmentRecord {
        let filename = item.resolvedFilename
        try FileName.validate(filename, kind: "filename", attachmentId: item.id)
        let ext = try FileName.normalizedExtension(
            FileName.localExtension(fileExtension: item.fileExtension, filename: filename),
            attachmentId: item.id
        )
        _ = try FileName.localName(id: item.id, fileExtension: ext)
        return AttachmentRecord(
            id: item.id,
            filename: filename,
            state: .queuedDownload,
            timestamp: 0,
            mediaType: item.mediaType,
            metaData: item.metaData
        )
    }
}
