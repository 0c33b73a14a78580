/// Decides which queued attachments start transferring next. A plain value with no I/O.
struct TransferScheduler: Sendable {
    /// The most transfers running at once.
    var maxConcurrentTransfers: Int

    /// The records to start now: oldest first, at most enough to fill the free slots, never one that is
    /// already busy (transferring, or being saved) or that is to be skipped until the next trigger (its
    /// transfer in that same state failed or was interrupted since; a record that moved to another state,
    /// say from upload to delete, is not held back).
    ///
    /// - Parameters:
    ///   - queued: Records in a queued state, oldest first.
    ///   - busy: Ids with a transfer in flight or a save in progress.
    ///   - inFlight: How many transfers are running.
    ///   - skipped: The state each id's last transfer failed in, not to retry before the next trigger.
    ///   - now: The current time in milliseconds since 1970: a record whose retry time is later waits.
    func select(
        queued: [AttachmentRecord],
        busy: Set<String>,
        inFlight: Int,
        skipped: [String: AttachmentState],
        now: Int64
    ) -> [AttachmentRecord] {
        var slots = maxConcurrentTransfers - inFlight
        var selected: [AttachmentRecord] = []
        var picked: Set<String> = []
        for record in queued
        where slots > 0 && !busy.contains(record.id) && skipped[record.id] != record.state
            && (record.nextAttemptAt ?? .min) <= now && picked.insert(record.id).inserted
        {
            selected.append(record)
            slots -= 1
        }
        return selected
    }
}
