/// Decides which local content the cache budget (``AttachmentQueue/Configuration/maxCacheBytes``) may take
/// away, and in which order. A plain value with no I/O.
///
/// Content is evictable when it has reached remote storage and is neither pinned nor needed: archived
/// content (unless its transfer was given up), and on-demand content of synced attachments. Everything else
/// is kept: pinned content, content that never reached remote storage, eagerly downloaded content and
/// content of transfers in the queue. Evictable content goes least recently used first, archived before
/// on-demand. The store's ``AttachmentStore/cacheClassSQL`` says the same in SQL.
struct CachePolicy: Sendable {
    /// Why a local file is kept, or that it may go.
    enum Class: String, Sendable, CaseIterable {
        case evictable
        case pinned
        /// Never reached remote storage: the only copy.
        case notUploaded
        /// Downloaded eagerly, or part of a queued transfer.
        case kept
    }

    /// The class of a record's local content (`nil` when it has none).
    static func classify(_ record: AttachmentRecord) -> Class? {
        guard record.localPath != nil else { return nil }
        if record.pinned { return .pinned }
        if !record.hasSynced { return .notUploaded }
        if (record.state == .archived && record.givenUp == nil) || (record.state == .synced && record.onDemand) {
            return .evictable
        }
        return .kept
    }

    /// The bytes allowed.
    var budget: Int64

    /// The records to evict, in order, to bring `used` bytes within the budget: least recently used first,
    /// archived before on-demand, skipping records not evictable or `busy` (being transferred). Eviction is
    /// conditional (a record may change first), so the caller evicts in this order and stops once within the
    /// budget.
    func evictionOrder(used: Int64, candidates: [AttachmentRecord], busy: Set<String>) -> [AttachmentRecord] {
        guard used > budget else { return [] }
        return
            candidates
            .filter { Self.classify($0) == .evictable && !busy.contains($0.id) }
            .sorted {
                ($0.state == .archived ? 0 : 1, $0.lastUsedAt ?? 0, $0.timestamp)
                    < ($1.state == .archived ? 0 : 1, $1.lastUsedAt ?? 0, $1.timestamp)
            }
    }

    /// Whether evicting every evictable byte would still leave `used` over the budget: what remains is
    /// pinned, not uploaded yet, or kept.
    func cannotMeet(used: Int64, evictable: Int64) -> Bool {
        used.subtractingClamped(evictable) > budget
    }
}
