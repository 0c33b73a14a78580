/// The table's totals in one pass: the status's sums and the report's outliers (largest attachments, invalid
/// sizes), read with one scan of the table instead of one query each.
///
/// SQLite's `GROUP BY` over a table without a fitting index sorts every row first, and the state index
/// makes it look each row up by rowid; the five queries this replaced took 1.5 s over 1,000,000 records.
/// The predicates stay SQL (``AttachmentStore/cacheClassSQL``, the local-only condition), so hostile values of the flag
/// columns are judged exactly as the queries judge them; sizes are judged as
/// ``AttachmentStore/countedSizeSQL`` does (an integer of at least 0), and sums saturate at `Int64.max` as
/// the queries' casts do.
extension AttachmentStore {
    /// What one scan found.
    struct StatusScan: Sendable {
        /// The status rows of kinds 0 (totals by state), 3 (never uploaded) and 4 (local bytes by cache class)
        /// (see ``statusListsSQL`` for the kinds).
        var rows: [StatusRow]
        /// How many records the table holds.
        var recordCount: Int
        /// The ids of the largest records of a valid size, largest first (ties by id), at most the limit asked.
        var largestIds: [String]
        /// The first records of an invalid size by id (at most the limit asked), with their state (`nil` when
        /// not one) and their size as stored.
        var invalidSizes: [(id: String, state: AttachmentState?, size: SqlValue)]
    }

    /// Scans the whole table once; keeps the `largest` largest records' ids and the first `invalidLimit`
    /// records of an invalid size.
    ///
    /// - Throws: The database's errors; a ``LocalDatabaseError`` naming `state` for a record whose state is
    ///   not an integer.
    func statusScan(largest: Int, invalidLimit: Int, in tx: SqlTransaction) throws -> StatusScan {
        // The columns below by position, read by index rather than by name for each of a million rows.
        let idColumn = 0
        let stateColumn = 1
        let sizeColumn = 2
        let localColumn = 3
        let localOnlyColumn = 4
        let classColumn = 5
        let classes = CachePolicy.Class.allCases
        let classCodes = classes.enumerated().map { "WHEN '\($0.element.rawValue)' THEN \($0.offset)" }
        let sql = """
            SELECT id, state, size, local_uri IS NOT NULL AS has_local,
                   (local_uri IS NOT NULL AND coalesce(has_synced, 0) = 0
                    AND state IN \(StateSet.sql([.queuedUpload, .archived]))) AS local_only,
                   CASE \(Self.cacheClassSQL) \(classCodes.joined(separator: " ")) END AS class
            FROM \(table)
            """
        var known = [StateTotals](repeating: StateTotals(), count: 5)
        var other: [Int: StateTotals] = [:]
        var localOnly = StateTotals()
        var classBytes = [Int64?](repeating: nil, count: classes.count)
        var count = 0
        var top = Ranking(limit: largest)
        var invalid = Ranking(limit: invalidLimit)
        var invalidDetails: [String: (AttachmentState?, SqlValue)] = [:]
        try tx.cached.forEachRow(sql: sql, parameters: []) { cursor in
            count += 1
            let state: Int
            if case .integer(let raw) = cursor.value(at: stateColumn), let value = Int(exactly: raw) {
                state = value
            } else {
                // Not an integer: the getter throws the typed error that names the column.
                state = try cursor.getInt(name: "state")
            }
            let size = cursor.value(at: sizeColumn)
            let hasLocal = cursor.value(at: localColumn) != .integer(0)
            var counted: Int64?
            var isInvalid = false
            switch size {
            case .null: break
            case .integer(let value) where value >= 0: counted = value
            default: isInvalid = true
            }
            let isNull = size == .null
            if known.indices.contains(state) {
                known[state].add(counted, isNull: isNull, isInvalid: isInvalid, local: hasLocal)
            } else {
                other[state, default: StateTotals()].add(counted, isNull: isNull, isInvalid: isInvalid, local: hasLocal)
            }
            if hasLocal {
                if cursor.value(at: localOnlyColumn) != .integer(0) {
                    localOnly.add(counted, isNull: isNull, isInvalid: isInvalid, local: true)
                }
                if case .integer(let code) = cursor.value(at: classColumn), let index = Int(exactly: code),
                    classBytes.indices.contains(index)
                {
                    classBytes[index] = (classBytes[index] ?? 0).addingClamped(counted ?? 0)
                }
            }
            if let counted, top.admits(size: counted) {
                top.insert(size: counted, id: Self.text(of: cursor.value(at: idColumn)))
            }
            if isInvalid {
                let id = Self.text(of: cursor.value(at: idColumn))
                if invalid.admits(id: id) {
                    if let dropped = invalid.insert(id: id) { invalidDetails[dropped] = nil }
                    invalidDetails[id] = (AttachmentState(rawValue: state), size)
                }
            }
            return true
        }
        for (state, totals) in known.enumerated() where totals.count > 0 { other[state] = totals }
        var rows: [StatusRow] = other.sorted { $0.key < $1.key }.map { state, totals in
            StatusRow(
                state: AttachmentState(rawValue: state) ?? .archived,
                totals: QueueStatus.Totals(
                    count: totals.count, bytes: totals.bytes, unknownSizeCount: totals.unknownSize,
                    invalidSizeCount: totals.invalidSize),
                localBytes: totals.localBytes)
        }
        rows.append(
            StatusRow(
                state: .queuedUpload, localBytes: 0,
                localOnly: QueueStatus.Totals(count: localOnly.count, bytes: localOnly.bytes)))
        for (index, bytes) in classBytes.enumerated() {
            guard let bytes else { continue }
            rows.append(
                StatusRow(
                    state: .queuedDownload, localBytes: 0,
                    cacheClass: ClassBytes(cacheClass: classes[index], bytes: bytes)))
        }
        return StatusScan(
            rows: rows, recordCount: count, largestIds: top.ids,
            invalidSizes: invalid.ids.compactMap { id in
                invalidDetails[id].map { (id: id, state: $0.0, size: $0.1) }
            })
    }

    /// Every status row: the sums of one scan, then the retries, give-ups and hand-offs through their
    /// indexes.
    func statusRows(in tx: SqlTransaction) throws -> [StatusRow] {
        try statusScan(largest: 0, invalidLimit: 0, in: tx).rows
            + tx.cached.getAll(sql: statusListsSQL) { try AttachmentStore.statusRow($0) }
    }

    /// An id as the reports show it: its text, or the description of a value of another type.
    private static func text(of id: SqlValue) -> String {
        if case .text(let text) = id { return text }
        return id.description
    }

    /// The sums of one state (or of the records never uploaded).
    private struct StateTotals {
        var count = 0
        var bytes: Int64 = 0
        var localBytes: Int64 = 0
        var unknownSize = 0
        var invalidSize = 0

        mutating func add(_ counted: Int64?, isNull: Bool, isInvalid: Bool, local: Bool) {
            count += 1
            if let counted {
                bytes = bytes.addingClamped(counted)
                if local { localBytes = localBytes.addingClamped(counted) }
            }
            if isNull { unknownSize += 1 }
            if isInvalid { invalidSize += 1 }
        }
    }
}

/// The first `limit` records of a scan, kept as they come: the largest by size (ties by id) when sizes are
/// given, else by id alone. Ids are compared by their UTF-8 bytes, as SQLite's `ORDER BY id` compares text.
struct Ranking {
    let limit: Int
    private(set) var ids: [String] = []
    private var sizes: [Int64] = []

    init(limit: Int) {
        self.limit = max(0, limit)
    }

    /// Whether a record of `size` could be among the largest: reading its id is worth it.
    func admits(size: Int64) -> Bool {
        guard limit > 0 else { return false }
        guard ids.count == limit, let last = sizes.last else { return true }
        return size >= last
    }

    /// Adds a record of `size` and `id` in its place among the largest, dropping the last beyond the limit.
    mutating func insert(size: Int64, id: String) {
        var index = ids.count
        for position in ids.indices
        where size > sizes[position] || (size == sizes[position] && Self.precedes(id, ids[position])) {
            index = position
            break
        }
        guard index < limit else { return }
        ids.insert(id, at: index)
        sizes.insert(size, at: index)
        if ids.count > limit {
            ids.removeLast()
            sizes.removeLast()
        }
    }

    /// Whether a record of `id` could be among the first by id.
    func admits(id: String) -> Bool {
        guard limit > 0 else { return false }
        guard ids.count == limit, let last = ids.last else { return true }
        return Self.precedes(id, last)
    }

    /// Adds `id` in its place among the first by id; returns the id dropped beyond the limit, if any.
    mutating func insert(id: String) -> String? {
        let index = ids.firstIndex { Self.precedes(id, $0) } ?? ids.count
        guard index < limit else { return id }
        ids.insert(id, at: index)
        return ids.count > limit ? ids.removeLast() : nil
    }

    /// Whether `a` sorts before `b` by bytes.
    static func precedes(_ a: String, _ b: String) -> Bool {
        a.utf8.lexicographicallyPrecedes(b.utf8)
    }
}
