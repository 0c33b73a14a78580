import Foundation

/// What an attachments table says, read without a queue: for tools that inspect an app's database (the
/// `attachment-sync status` command), even while the app runs.
///
/// It is one read transaction over the table: counts and bytes by state, transfers waiting for a retry,
/// given-up transfers, content that never reached remote storage, local content by what the cache budget
/// may evict, the largest attachments, and the records whose size is not a byte count.
///
/// Sizes come from synced rows, so any value may be in the table: sums count sizes that are integers of at
/// least 0 and saturate at `Int64.max`; ``QueueStatus/Totals`` counts the records left out (of unknown or
/// invalid size), and ``invalidSizes`` shows the invalid ones as stored.
///
/// ```swift
/// let db = try LocalDatabase.readOnly(path: "app.sqlite")
/// let report = try await AttachmentTableReport.read(from: db)
/// print(report.status.count(.queuedUpload), "to upload")
/// try await db.close()
/// ```
public struct AttachmentTableReport: Sendable {
    /// One attachment, as the report lists it.
    public struct Entry: Sendable, Hashable {
        /// The attachment's id.
        public var id: String
        /// Its remote file's name.
        public var filename: String
        /// Its state.
        public var state: AttachmentState
        /// Its size in bytes, when known.
        public var size: Int64?
        /// Whether its content is on this device.
        public var contentAvailable: Bool
        /// Whether its content is on this device only (never uploaded).
        public var isLocalOnly: Bool
    }

    /// A record whose size is not a byte count: negative, or a value of another type than integer (a real,
    /// text or blob value written by something other than the queue). Sums leave it out.
    public struct InvalidSize: Sendable, Hashable {
        /// The attachment's id.
        public var id: String
        /// Its state; `nil` when the table holds a value that is not one.
        public var state: AttachmentState?
        /// The size as the table holds it.
        public var size: SqlValue
    }

    /// The table's name.
    public var table: String
    /// How many records the table holds.
    public var recordCount: Int
    /// The snapshot, as ``AttachmentQueue/status`` gives it (without transfers in flight, which only a
    /// running queue knows).
    public var status: QueueStatus
    /// The largest attachments, largest first.
    public var largest: [Entry]
    /// Up to ``invalidSizesListed`` records whose size is not a byte count, by id; the totals in ``status``
    /// count them all (``QueueStatus/Totals/invalidSizeCount``).
    public var invalidSizes: [InvalidSize] = []

    /// How many records of invalid size ``invalidSizes`` lists at most: 100.
    public static let invalidSizesListed = 100

    /// Reads the report from `db`.
    ///
    /// - Parameters:
    ///   - db: The app's database (``LocalDatabase/readOnly(path:configuration:)`` for a tool).
    ///   - table: The attachments table's name. The default is `attachments`.
    ///   - maxCacheBytes: The cache budget to measure the local content against. The default is `nil`.
    ///   - largest: How many of the largest attachments to list. The default is 10.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/invalidConfiguration``
    ///   naming the table when it is missing or lacks attachment columns, or
    ///   ``AttachmentError/Code-swift.struct/invalidName`` for a bad table name; database errors.
    public static func read(
        from db: LocalDatabase, table: String = "attachments", maxCacheBytes: Int64? = nil, largest: Int = 10
    ) async throws -> AttachmentTableReport {
        do {
            try SqlIdentifier.validate(table, kind: "table")
        } catch {
            throw AttachmentError(
                code: .invalidName, message: "\(String(reflecting: table)) cannot name a table: \(error)", name: table)
        }
        let store = AttachmentStore(table: table)
        let limit = max(0, largest)
        // One scan of the table sums it and finds the outliers; the retries and give-ups come through indexes.
        let (scan, lists, records) = try await db.readTransaction { tx in
            try store.checkTable(in: tx)
            let scan = try store.statusScan(largest: limit, invalidLimit: invalidSizesListed, in: tx)
            let lists = try tx.getAll(sql: store.statusListsSQL) { try AttachmentStore.statusRow($0) }
            let found = Dictionary(
                try store.records(ids: Set(scan.largestIds), in: tx).map { ($0.id, $0) },
                uniquingKeysWith: { first, _ in first })
            return (scan, lists, scan.largestIds.compactMap { found[$0] })
        }
        return AttachmentTableReport(
            table: table, recordCount: scan.recordCount,
            status: AttachmentQueue.snapshot(scan.rows + lists, progress: nil, budget: maxCacheBytes),
            largest: records.map {
                Entry(
                    id: $0.id, filename: $0.filename, state: $0.state, size: $0.size,
                    contentAvailable: $0.localPath != nil, isLocalOnly: $0.isLocalOnly)
            },
            invalidSizes: scan.invalidSizes.map { InvalidSize(id: $0.id, state: $0.state, size: $0.size) })
    }
}
