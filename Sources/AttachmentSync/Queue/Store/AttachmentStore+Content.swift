/// The reads and writes of local content: which files records refer to, who owns a filename, the cache
/// budget's bookkeeping (last use, pins, bytes held) and letting go of content.
extension AttachmentStore {
    /// Which of `localPaths` some record refers to (read in batches, to stay under SQLite's limit on
    /// query parameters).
    func referenced(localPaths: Set<String>, in tx: SqlTransaction) throws -> Set<String> {
        var found: Set<String> = []
        let paths = Array(localPaths)
        for start in stride(from: 0, to: paths.count, by: 500) {
            let batch = paths[start..<min(start + 500, paths.count)]
            let marks = Array(repeating: "?", count: batch.count).joined(separator: ", ")
            let rows = try tx.getAll(
                sql: "SELECT local_uri FROM \(table) WHERE local_uri IN (\(marks))",
                parameters: batch.map { $0 as (any SqlValueConvertible)? }
            ) { try $0.getString(name: "local_uri") }
            found.formUnion(rows)
        }
        return found
    }

    /// The condition of records that are disposable cache: archived, not given up, and not holding the only
    /// copy of their content (a local file that never reached remote storage).
    static let evictableArchived =
        "state = \(AttachmentState.archived.rawValue) AND given_up IS NULL "
        + "AND NOT (local_uri IS NOT NULL AND coalesce(has_synced, 0) = 0)"

    /// Archived records beyond the newest `keep`, oldest first: the ones to evict. Records that are not
    /// disposable (see ``evictableArchived``) are neither counted nor returned.
    func archivedBeyond(keep: Int64, in tx: SqlTransaction) throws -> [AttachmentRecord] {
        try tx.cached.getAll(
            sql: """
                SELECT \(AttachmentRecord.columns) FROM \(table) WHERE \(Self.evictableArchived)
                ORDER BY timestamp DESC, id DESC LIMIT -1 OFFSET ?
                """,
            parameters: [keep]
        ) { try AttachmentRecord(cursor: $0) }
        .reversed()
    }

    /// The ids of records (other than `id`) whose remote file is `filename`, or whose local file is `localPath`.
    func owners(ofFilename filename: String?, localPath: String?, except id: String, in tx: SqlTransaction) throws
        -> [String]
    {
        var owners: [String] = []
        if let filename {
            owners += try tx.cached.getAll(
                sql: "SELECT id FROM \(table) WHERE filename = ? AND id <> ? LIMIT 1", parameters: [filename, id]
            ) { try $0.getString(name: "id") }
        }
        if let localPath {
            owners += try tx.cached.getAll(
                sql: "SELECT id FROM \(table) WHERE local_uri = ? AND id <> ? LIMIT 1", parameters: [localPath, id]
            ) { try $0.getString(name: "id") }
        }
        return owners
    }

    /// The records that use one of `filenames` as their remote file, as (filename, id) pairs, read in
    /// batches. (A pair list rather than a dictionary: filenames that differ only in their Unicode form are
    /// distinct in SQLite but one key in a Swift dictionary.)
    func owners(ofFilenames filenames: [String], in tx: SqlTransaction) throws -> [(filename: String, id: String)] {
        var owners: [(filename: String, id: String)] = []
        for start in stride(from: 0, to: filenames.count, by: 500) {
            let batch = filenames[start..<min(start + 500, filenames.count)]
            let placeholders = Array(repeating: "?", count: batch.count).joined(separator: ", ")
            owners += try tx.getAll(
                sql: "SELECT filename, id FROM \(table) WHERE filename IN (\(placeholders))",
                parameters: batch.map { $0 as (any SqlValueConvertible)? },
                mapper: { (filename: try $0.getString(name: "filename"), id: try $0.getString(name: "id")) })
        }
        return owners
    }

    /// Marks the content as used at `now` (milliseconds since 1970), for least-recently-used eviction.
    func touch(id: String, at now: Int64, in tx: SqlTransaction) throws {
        _ = try tx.cached.execute(sql: "UPDATE \(table) SET last_used_at = ? WHERE id = ?", parameters: [now, id])
    }

    /// Pins or unpins a record; `false` when there is none.
    func setPinned(_ pinned: Bool, id: String, in tx: SqlTransaction) throws -> Bool {
        try tx.cached.execute(sql: "UPDATE \(table) SET pinned = ? WHERE id = ?", parameters: [pinned, id]) == 1
    }

    /// Records a hash and size the app's row carries, where the record knows none yet and has no content.
    func learn(contentHash: String?, size: Int64?, id: String, in tx: SqlTransaction) throws {
        _ = try tx.cached.execute(
            sql: "UPDATE \(table) SET content_hash = coalesce(content_hash, ?), size = coalesce(size, ?) "
                + "WHERE id = ? AND local_uri IS NULL AND state IN \(StateSet.sql([.queuedDownload, .synced]))",
            parameters: [contentHash, size, id])
    }

    /// The bytes of content on the device.
    func localContentBytes(in tx: SqlTransaction) throws -> Int64 {
        try tx.cached.get(
            sql:
                "SELECT CAST(total(\(Self.countedSizeSQL)) AS INTEGER) AS bytes FROM \(table) WHERE local_uri IS NOT NULL"
        ) {
            try $0.getInt64Optional(name: "bytes")
        } ?? 0
    }

    /// An archived, disposable record lets go of its file `localPath`; `false` when it changed meanwhile.
    func releaseArchivedContent(id: String, localPath: String, in tx: SqlTransaction) throws -> Bool {
        try tx.cached.execute(
            sql: "UPDATE \(table) SET local_uri = NULL WHERE id = ? AND local_uri = ? AND \(Self.evictableArchived)",
            parameters: [id, localPath]) == 1
    }

    /// Deletes an archived, disposable record that holds no file; `false` when it changed meanwhile.
    func deleteReleasedArchived(id: String, in tx: SqlTransaction) throws -> Bool {
        try tx.cached.execute(
            sql: "DELETE FROM \(table) WHERE id = ? AND local_uri IS NULL AND \(Self.evictableArchived)",
            parameters: [id]) == 1
    }

    /// A record still in `state` whose content reached remote storage lets go of its file `localPath`;
    /// `false` when it changed meanwhile (or its content was never uploaded).
    func releaseUploadedContent(id: String, ifState state: AttachmentState, localPath: String, in tx: SqlTransaction)
        throws -> Bool
    {
        try tx.cached.execute(
            sql: "UPDATE \(table) SET local_uri = NULL "
                + "WHERE id = ? AND state = ? AND local_uri = ? AND coalesce(has_synced, 0) = 1",
            parameters: [id, state.rawValue, localPath]) == 1
    }

    /// Archives every record and lets it go of its file (the first step of `clearQueue`).
    func archiveAllReleasingContent(in tx: SqlTransaction) throws {
        _ = try tx.cached.execute(
            sql: "UPDATE \(table) SET state = ?, local_uri = NULL, given_up = NULL",
            parameters: [AttachmentState.archived.rawValue])
    }
}
