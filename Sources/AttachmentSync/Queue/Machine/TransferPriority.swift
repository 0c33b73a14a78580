/// The order in which transfers deserve a slot, and which one to pause for a more urgent one: a download
/// asked for on request, then a raised attachment, then this device's changes (uploads and deletes), then
/// downloads the queue makes by itself. Pure functions over the transfers in flight.
enum TransferPriority<Handle: Hashable & Sendable> {
    /// A transfer in flight.
    struct Transfer {
        /// The record's state when it started: what it does (see `AttachmentQueue.TransferKind`).
        var state: AttachmentState
        /// Started by `download(attachmentId:)`: `stopSync` leaves it running. It starts whatever the
        /// concurrency bound, but takes a slot while it runs.
        var onRequest: Bool
        /// Its task, once the actor has made it (set in the same synchronous step as the decision).
        var handle: Handle?
        /// The ``AdaptiveConcurrency/generation`` it started in.
        var generation = 0
        /// What it needs from the network to keep going.
        var requirement = NetworkRequirement.any
        /// When it started, counted across transfers: of two equal candidates to pause, the later one goes
        /// (it has moved the least).
        var order = 0
    }

    /// The priority of `id`: 4 a download asked for, 3 raised, 2 an upload or delete, 1 a download the queue
    /// makes by itself, 0 nothing in flight and not raised.
    static func priority(of id: String, in transfers: [String: Transfer], raised: Set<String>) -> Int {
        guard let transfer = transfers[id] else { return raised.contains(id) ? 3 : 0 }
        if transfer.onRequest { return 4 }
        if raised.contains(id) { return 3 }
        return transfer.state == .queuedDownload ? 1 : 2
    }

    /// The background transfer to pause so that one of `priority` can start, when every slot is taken: the
    /// lowest-priority one below it (a delete is never paused: it is quick, and has nothing to resume), the
    /// latest started among equals. `nil` when a slot is free or nothing ranks below.
    static func transferToPause(
        for priority: Int, in transfers: [String: Transfer], raised: Set<String>, maxConcurrentTransfers: Int
    ) -> (id: String, handle: Handle)? {
        guard transfers.count >= maxConcurrentTransfers else { return nil }
        func rank(_ id: String) -> Int { self.priority(of: id, in: transfers, raised: raised) }
        let candidates = transfers.filter { id, transfer in
            !transfer.onRequest && transfer.state != .queuedDelete && transfer.handle != nil && rank(id) < priority
        }
        guard
            let victim = candidates.min(by: {
                (rank($0.key), -$0.value.order) < (rank($1.key), -$1.value.order)
            }), let handle = victim.value.handle
        else { return nil }
        return (victim.key, handle)
    }
}
