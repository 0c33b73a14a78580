/// Decides how the attachments table follows the app's rows: given the watched items and the current
/// records, which records to create, restore, re-queue or archive. A plain value with no I/O.
struct Reconciler: Sendable {
    /// Which watched attachments are downloaded at once (`queuedDownload`) and which are made remote-only
    /// (`synced` without content) until asked for.
    var policy: DownloadPolicy

    struct Decision: Equatable, Sendable {
        /// New records to insert, in `queuedDownload`.
        var inserts: [AttachmentRecord] = []
        /// Archived records whose local file is still cached: back to `synced`, no download.
        var restores: [String] = []
        /// Archived records whose local file never reached remote storage (an upload given up, or archived
        /// before it finished): back to `queuedUpload`, never to `synced`.
        var reuploads: [String] = []
        /// Records still without content whose item now brings a hash or size they lack (the row learned
        /// it after the record was made): they take it, so the download is checked against it.
        var learned: [AttachmentRecord] = []
        /// Synced records whose local content (from remote storage) disagrees with the hash or size the item
        /// now carries: the content is discarded and fetched again, checked against the item (a download that
        /// committed before the row brought its hash is not trusted over it). With the item's hash and size,
        /// and the state to go to: `queuedDownload`, or remote-only `synced` for on-demand ones.
        var refetches: [AttachmentRecord] = []
        /// Archived records without a local file, with the item's metadata: back to `queuedDownload`
        /// (eager) or to remote-only `synced` (on demand), as each record's state says.
        var requeues: [AttachmentRecord] = []
        /// Records no row refers to any more, with the state they were seen in.
        var archives: [(id: String, from: AttachmentState)] = []
        /// Items whose names cannot reach the file system, with why.
        var rejected: [(item: WatchedAttachmentItem, error: AttachmentError)] = []

        var isEmpty: Bool {
            inserts.isEmpty && restores.isEmpty && reuploads.isEmpty && requeues.isEmpty && archives.isEmpty
                && learned.isEmpty && refetches.isEmpty
        }

        /// Moves to ``rejected`` every insert whose remote file is already another attachment's (`owners`: the
        /// records using those filenames) or another insert's of this decision: two ids never share a remote
        /// file.
        mutating func rejectSharedFilenames(owners: [(filename: String, id: String)]) {
            // Keyed by the bytes, as SQLite compares them (Swift would merge canonically equivalent names).
            var claimed = Dictionary(
                owners.map { (Array($0.filename.utf8), $0.id) }, uniquingKeysWith: { first, _ in first })
            var kept: [AttachmentRecord] = []
            for record in inserts {
                if let owner = claimed[Array(record.filename.utf8)], !owner.utf8.elementsEqual(record.id.utf8) {
                    let item = (try? WatchedAttachmentItem(id: record.id, filename: record.filename))
                    let error = AttachmentError(
                        code: .alreadyExists,
                        message: "watched attachment \(String(reflecting: record.id)) names the file "
                            + "\(String(reflecting: record.filename)), which is attachment "
                            + "\(String(reflecting: owner))'s; two attachments cannot share a file",
                        attachmentId: record.id, name: record.filename)
                    if let item { rejected.append((item, error)) }
                    continue
                }
                claimed[Array(record.filename.utf8)] = record.id
                kept.append(record)
            }
            inserts = kept
        }

        static func == (lhs: Decision, rhs: Decision) -> Bool {
            lhs.inserts == rhs.inserts && lhs.restores == rhs.restores && lhs.reuploads == rhs.reuploads
                && lhs.requeues == rhs.requeues && lhs.learned == rhs.learned && lhs.refetches == rhs.refetches
                && lhs.archives.map(\.id) == rhs.archives.map(\.id)
                && lhs.archives.map(\.from) == rhs.archives.map(\.from)
                && lhs.rejected.map(\.item) == rhs.rejected.map(\.item)
        }
    }

    /// Which records an emission of the watch has to be compared with.
    enum Scope: Equatable, Sendable {
        /// The whole table: nothing is known about the previous emission.
        case everything
        /// Only these ids: they joined or left the watch since the previous emission, or their records
        /// changed since it was reconciled. The decision for any other id would be the same as last time.
        case ids(Set<String>)

        /// The scope of emission `current` after `previous` (`nil` when there was none, or it was not
        /// reconciled), given the ids whose records changed since.
        ///
        /// Emissions of one query mostly come in the same order, so the ids that joined or left are found
        /// between the longest common prefix and suffix of the two lists: comparing strings in order is
        /// far cheaper than hashing 100,000 of them into sets. When that middle part is large (rows
        /// reordered), the exact set difference is taken instead.
        init(previous: [String]?, current: [String], changed: Set<String>, middleLimit: Int = Self.middleLimit) {
            guard let previous else {
                self = .everything
                return
            }
            var start = 0
            while start < previous.count, start < current.count, previous[start] == current[start] { start += 1 }
            var previousEnd = previous.count
            var currentEnd = current.count
            while previousEnd > start, currentEnd > start, previous[previousEnd - 1] == current[currentEnd - 1] {
                previousEnd -= 1
                currentEnd -= 1
            }
            // Every id that joined is in the current list's middle part, and every id that left in the
            // previous list's: outside them both lists hold the same ids.
            var ids = changed
            if (previousEnd - start) + (currentEnd - start) <= middleLimit {
                ids.formUnion(previous[start..<previousEnd])
                ids.formUnion(current[start..<currentEnd])
            } else {
                let previousSet = Set(previous[start..<previousEnd])
                let currentSet = Set(current[start..<currentEnd])
                ids.formUnion(currentSet.subtracting(previousSet))
                ids.formUnion(previousSet.subtracting(currentSet))
            }
            self = .ids(ids)
        }

        /// Above this many ids in the differing middle parts, the exact difference is computed.
        static let middleLimit = 4096

        /// Whether there is nothing to compare.
        var isEmpty: Bool { self == .ids([]) }

        /// The scope of ids, for a scope computed over ``Reconciler/scopeKey(of:)`` keys.
        var byId: Scope {
            switch self {
            case .everything: .everything
            case .ids(let keys): .ids(Set(keys.map(Reconciler.id(fromScopeKey:))))
            }
        }

        /// The items of `items` in scope, in order.
        func items(of items: [WatchedAttachmentItem]) -> [WatchedAttachmentItem] {
            switch self {
            case .everything: items
            case .ids(let ids): items.filter { ids.contains($0.id) }
            }
        }
    }

    /// What an item is compared by between two emissions: its id, and the hash and size it carries when it
    /// carries them, so a row that learns its attachment's hash is looked at again.
    static func scopeKey(of item: WatchedAttachmentItem) -> String {
        guard item.contentHash != nil || item.size != nil else { return item.id }
        return "\(item.id)\u{1F}\(item.contentHash ?? "")\u{1F}\(item.size.map(String.init) ?? "")"
    }

    /// The id a ``scopeKey(of:)`` key stands for.
    static func id(fromScopeKey key: String) -> String {
        guard let separator = key.unicodeScalars.firstIndex(of: "\u{1F}") else { return key }
        return String(key.unicodeScalars[..<separator])
    }

    /// Compares `items` (one emission of the app's watch) with `records` (the whole table, or every record
    /// of a ``Scope``'s ids with the items of those ids).
    ///
    /// - A new id becomes a record named by the item's filename, else `<id>.<ext>`, with its media type and
    ///   metadata: `queuedDownload` when the policy says eager, remote-only `synced` when on demand.
    /// - An archived id that is watched again is restored: to `synced` when its file is still cached and
    ///   came from (or reached) remote storage, to `queuedUpload` when the cached file never did (the only
    ///   copy), else back to `queuedDownload` (eager) or remote-only `synced` (on demand).
    /// - An archived record whose transfer was given up stays as it is (no retry loop behind the error
    ///   handler's back), unless a row refers to it anew: it was not in the previous emission
    ///   (`previouslyWatched` says so; when it is `nil`, nothing is known and the record stays). Then it is
    ///   queued again like any archived record, its give-up forgotten. A given-up delete stays whatever the
    ///   rows say: the app asked for it.
    /// - A `synced` or `queuedDownload` record whose id is no longer watched is archived. Records waiting
    ///   for upload or delete are left alone: their transfer must finish first.
    func reconcile(
        items: [WatchedAttachmentItem], records: [String: AttachmentRecord],
        previouslyWatched: ((String) -> Bool)? = nil
    ) -> Decision {
        var decision = Decision()
        var watched: Set<String> = []
        for item in items {
            // Before the set: an id in another Unicode form would be merged with its NFC twin in it.
            do {
                try FileName.validateNormalization(item.id)
            } catch let error as AttachmentError {
                decision.rejected.append((item, error))
                continue
            } catch {
                continue
            }
            guard watched.insert(item.id).inserted else { continue }
            guard let record = records[item.id] else {
                do {
                    decision.inserts.append(try Self.newRecord(for: item, mode: policy.mode(for: item)))
                } catch let error as AttachmentError {
                    decision.rejected.append((item, error))
                } catch {
                    decision.rejected.append(
                        (item, AttachmentError(code: .invalidName, message: "\(error)", attachmentId: item.id)))
                }
                continue
            }
            if record.localPath == nil, record.state == .queuedDownload || record.state == .synced {
                var learned = record
                if learned.contentHash == nil, let hash = item.contentHash, FileStreaming.isSHA256(hash) {
                    learned.contentHash = hash.lowercased()
                }
                if learned.size == nil, let size = item.size, size >= 0 { learned.size = size }
                if learned != record { decision.learned.append(learned) }
            }
            if record.localPath != nil, record.state == .synced, record.hasSynced {
                let hash = item.contentHash.flatMap { FileStreaming.isSHA256($0) ? $0.lowercased() : nil }
                let size = item.size.flatMap { $0 >= 0 ? $0 : nil }
                let wrongHash = hash != nil && record.contentHash?.lowercased() != hash
                let wrongSize = size != nil && record.size != nil && record.size != size
                if wrongHash || wrongSize {
                    var refetch = record
                    refetch.contentHash = hash ?? record.contentHash
                    refetch.size = size  // the old size came from the content that is not trusted
                    refetch.state = record.onDemand ? .synced : .queuedDownload
                    decision.refetches.append(refetch)
                }
            }
            guard record.state == .archived else { continue }
            // A delete the app asked for is never undone by a row: only retry(attachmentId:) moves it on.
            if record.givenUp == .queuedDelete { continue }
            if record.givenUp != nil, previouslyWatched?(record.id) ?? true { continue }
            if record.localPath != nil {
                if record.hasSynced {
                    decision.restores.append(record.id)
                } else {
                    decision.reuploads.append(record.id)
                }
            } else {
                var requeued = record
                requeued.givenUp = nil
                requeued.onDemand = policy.mode(for: item) == .onDemand
                requeued.state = requeued.onDemand ? .synced : .queuedDownload
                requeued.metaData = item.metaData ?? record.metaData
                requeued.mediaType = item.mediaType ?? record.mediaType
                if requeued.contentHash == nil, let hash = item.contentHash, FileStreaming.isSHA256(hash) {
                    requeued.contentHash = hash.lowercased()
                }
                if requeued.size == nil, let size = item.size, size >= 0 { requeued.size = size }
                decision.requeues.append(requeued)
            }
        }
        let unwatched = records.values.filter {
            !watched.contains($0.id) && ($0.state == .synced || $0.state == .queuedDownload)
        }
        for record in unwatched.sorted(by: { ($0.timestamp, $0.id) < ($1.timestamp, $1.id) }) {
            decision.archives.append((record.id, record.state))
        }
        return decision
    }

    /// The record for a newly watched item, after checking every name it brings: `queuedDownload` when
    /// eager, remote-only `synced` when on demand.
    static func newRecord(for item: WatchedAttachmentItem, mode: DownloadPolicy.Mode) throws -> AttachmentRecord {
        let filename = item.resolvedFilename
        try FileName.validate(filename, kind: "filename", attachmentId: item.id)
        if item.filename == nil, item.id.contains(".") {
            // `<id>.<ext>` with a dotted id could be another id's name (`a.b` + `c`, `a` + `b.c`).
            _ = try FileName.derivedFilename(id: item.id, fileExtension: item.fileExtension)
        }
        if let hash = item.contentHash, !FileStreaming.isSHA256(hash) {
            throw AttachmentError(
                code: .invalidWatchedItem,
                message: "watched attachment \(String(reflecting: item.id)) has content hash "
                    + "\(String(reflecting: hash)), which is not a SHA-256 in hex (64 hex digits)",
                attachmentId: item.id, name: hash)
        }
        if let size = item.size, size < 0 {
            throw AttachmentError(
                code: .invalidWatchedItem,
                message: "watched attachment \(String(reflecting: item.id)) has a negative size (\(size))",
                attachmentId: item.id)
        }
        var record = AttachmentRecord(
            id: item.id,
            filename: filename,
            state: mode == .eager ? .queuedDownload : .synced,
            timestamp: 0,
            hasSynced: mode == .onDemand,
            mediaType: item.mediaType,
            size: item.size,
            metaData: item.metaData,
            contentHash: item.contentHash?.lowercased()
        )
        record.onDemand = mode == .onDemand
        // The local file's name must be valid too (it is what a download will write).
        _ = try record.localName()
        return record
    }
}
