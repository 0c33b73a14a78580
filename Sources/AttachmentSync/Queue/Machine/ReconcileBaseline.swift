/// What the next reconcile of the watched items starts from: the ids of the previous reconciled emission,
/// and the ids whose records the queue changed since a reconcile last read them. A sub-machine of
/// ``QueueStateMachine``: no I/O.
struct ReconcileBaseline: Sendable {
    /// What a reconcile starts from.
    struct Start: Equatable, Sendable {
        /// The ids of the previous reconciled emission, or `nil` to compare with the whole table.
        var previous: [String]?
        fileprivate var clears: Int
    }

    /// The ids of the previous emission of the watch, once reconciled.
    private var reconciledWatch: [String]?
    /// Ids whose records the queue changed or deleted since the last reconcile read them.
    private var changedSinceReconcile: Set<String> = []
    /// Counts `clearQueue` calls: a reconcile that overlapped one must not leave a baseline behind.
    private var tableClears = 0

    /// The ids noted since a reconcile last read them.
    var changed: Set<String> { changedSinceReconcile }

    /// A record was changed by the queue: the next reconcile looks at it.
    mutating func noteChanged(_ id: String) {
        changedSinceReconcile.insert(id)
    }

    /// A reconcile begins: it compares with the previous emission, which is forgotten until this one is
    /// reconciled (a failure makes the next one read everything).
    mutating func started() -> Start {
        defer { reconciledWatch = nil }
        return Start(previous: reconciledWatch, clears: tableClears)
    }

    /// The ids noted since the last reconcile read them; those noted from here on stay for the next one.
    mutating func takeChanged() -> Set<String> {
        defer { changedSinceReconcile.removeAll() }
        return changedSinceReconcile
    }

    /// The emission `current` is reconciled: the next compares with it, unless the table was cleared
    /// meanwhile.
    mutating func reconciled(_ start: Start, current: [String]) {
        if start.clears == tableClears { reconciledWatch = current }
    }

    /// The table was emptied: the next reconcile reads everything.
    mutating func tableCleared() {
        reconciledWatch = nil
        tableClears += 1
    }
}
