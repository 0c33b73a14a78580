/// The reads that feed the scheduler (due queued records, raised ones, the soonest retry, the sync
/// trigger's signal) and the writes that let waiting records run at once.
extension AttachmentStore {
    /// Records waiting for a transfer whose retry time (if any) has come by `now` (milliseconds since
    /// 1970), by priority: uploads and deletes (this device's changes) before downloads, each oldest first;
    /// at most `limit` of each.
    ///
    /// One query per state, each an ordered walk of the (`state`, `timestamp`) index that stops after
    /// `limit` rows, so a read costs the same with 100 or 100,000 records queued. (One query over
    /// `state IN (…)` cannot walk the index in order: SQLite reads every queued record and sorts them.)
    ///
    /// The records in `skipping` (those in flight) count towards the limit, as they come first, but are
    /// left out: only their ids are read.
    func queued(
        limit: Int, readyAt now: Int64, skipping busy: Set<String> = [], in tx: SqlTransaction
    ) throws -> [AttachmentRecord] {
        let changes = try queued(in: .queuedUpload, limit: limit, readyAt: now, skipping: busy, in: tx)
            .merged(with: try queued(in: .queuedDelete, limit: limit, readyAt: now, skipping: busy, in: tx))
        return Array(changes.prefix(limit))
            + (try queued(in: .queuedDownload, limit: limit, readyAt: now, skipping: busy, in: tx))
    }

    private func queued(
        in state: AttachmentState, limit: Int, readyAt now: Int64, skipping busy: Set<String>, in tx: SqlTransaction
    ) throws -> [AttachmentRecord] {
        var reader = AttachmentRecord.Reader()
        return try tx.cached.getAll(sql: queuedSQL, parameters: [state.rawValue, now, limit]) { cursor in
            let id = try reader.id(cursor)
            return busy.contains(id) ? nil : try reader.read(cursor, id: id)
        }.compactMap { $0 }
    }

    /// The read of one queued state's due records, oldest first; parameters: the state, now, the limit.
    /// The retry time is tested through `coalesce` so that no index on it applies: with one, SQLite may
    /// collect every due record of the state through the (`state`, `next_attempt_at`) index and sort them,
    /// where walking (`state`, `timestamp`) in order stops at the limit.
    var queuedSQL: String {
        """
        SELECT \(AttachmentRecord.columns) FROM \(table)
        WHERE state = ? AND coalesce(next_attempt_at, 0) <= ?\(notHandedOff)
        ORDER BY timestamp, id LIMIT ?
        """
    }

    /// The queued records among `ids` (whatever their retry time: an app raised them).
    func queued(ids: [String], in tx: SqlTransaction) throws -> [AttachmentRecord] {
        guard !ids.isEmpty else { return [] }
        let marks = Array(repeating: "?", count: ids.count).joined(separator: ", ")
        return try tx.getAll(
            sql: "SELECT \(AttachmentRecord.columns) FROM \(table) WHERE state IN \(StateSet.queuedSQL) "
                + "AND id IN (\(marks))\(notHandedOff) ORDER BY timestamp, id",
            parameters: ids.map { $0 as (any SqlValueConvertible)? }
        ) { try AttachmentRecord(cursor: $0) }
    }

    /// Lets queued records whose last tries failed for the network run at once, their backoff started over
    /// (those failures spent no attempt). Returns how many there were.
    func resetConnectivityFailures(in tx: SqlTransaction) throws -> Int {
        try tx.cached.execute(
            sql: "UPDATE \(table) SET next_attempt_at = NULL, connectivity_failure = NULL "
                + "WHERE connectivity_failure IS NOT NULL AND state IN \(StateSet.queuedSQL)",
            arguments: [])
    }

    /// Lets queued records whose last tries could not reach the local files run at once, their backoff
    /// started over: the files are in reach again. Returns how many there were.
    func resetLocalUnavailable(in tx: SqlTransaction) throws -> Int {
        try tx.cached.execute(
            sql: "UPDATE \(table) SET next_attempt_at = NULL, local_unavailable = NULL "
                + "WHERE local_unavailable IS NOT NULL AND state IN \(StateSet.queuedSQL)",
            arguments: [])
    }

    /// Lets queued records whose last tries found their encryption key missing run at once, their backoff
    /// started over: the app reports new keys. Returns their ids.
    func resetKeyUnavailable(in tx: SqlTransaction) throws -> [String] {
        let condition = "key_unavailable IS NOT NULL AND state IN \(StateSet.queuedSQL)"
        let ids = try tx.cached.getAll(sql: "SELECT id FROM \(table) WHERE \(condition)", parameters: []) {
            try $0.getString(name: "id")
        }
        guard !ids.isEmpty else { return [] }
        try tx.cached.execute(
            sql: "UPDATE \(table) SET next_attempt_at = NULL, key_unavailable = NULL WHERE \(condition)",
            parameters: [])
        return ids
    }

    /// The soonest retry time after `now` among queued records, if any: per state, the first entry after
    /// `now` in the (`state`, `next_attempt_at`) index.
    func earliestRetry(after now: Int64, in tx: SqlTransaction) throws -> Int64? {
        try StateSet.queued.compactMap { state in
            try tx.cached.get(sql: earliestRetrySQL, parameters: [state.rawValue, now]) {
                try $0.getInt64Optional(name: "soonest")
            }
        }.min()
    }

    /// The soonest retry time of one queued state after a time; parameters: the state, the time.
    var earliestRetrySQL: String {
        "SELECT min(next_attempt_at) AS soonest FROM \(table) WHERE state = ? AND next_attempt_at > ?"
    }

    /// A query whose result changes whenever a record enters a queued state, for the sync trigger's watch:
    /// the newest `timestamp` of each queued state. Every write of the queue that puts a record in a queued
    /// state gives it a timestamp later than any it gave before, so that state's newest timestamp moves.
    /// Each is one look-up in the (`state`, `timestamp`) index, however long the queue: the watch runs
    /// again after every commit to the table, a finished transfer's included. (Records leaving a queued
    /// state need no signal: the queue finishes those transfers itself, and a record leaving otherwise
    /// frees no slot.)
    var queuedSignalSQL: String {
        "SELECT "
            + StateSet.queued.map {
                "(SELECT max(timestamp) FROM \(table) WHERE state = \($0.rawValue)) AS latest\($0.rawValue)"
            }.joined(separator: ", ")
    }
}

extension Array where Element == AttachmentRecord {
    /// Both arrays' records, oldest first (each must be sorted by `timestamp`, then `id`).
    func merged(with other: [AttachmentRecord]) -> [AttachmentRecord] {
        var merged: [AttachmentRecord] = []
        merged.reserveCapacity(count + other.count)
        var (i, j) = (startIndex, other.startIndex)
        while i < endIndex, j < other.endIndex {
            if (other[j].timestamp, other[j].id) < (self[i].timestamp, self[i].id) {
                merged.append(other[j])
                j += 1
            } else {
                merged.append(self[i])
                i += 1
            }
        }
        return merged + self[i...] + other[j...]
    }
}
