/// The values events take and return.
extension QueueStateMachine {
    /// Something the queue is to do: what events return, in the order to do it. One runner in the actor
    /// carries every action out (`AttachmentQueue.run(_:)`).
    enum Action {
        /// Start these transfers: their slots are taken; attach each task with ``started(_:handle:)``.
        case startTransfers([AttachmentRecord])
        /// Read the queued records and hand them back with
        /// ``recordsRead(_:records:earliestRetry:now:requirement:)`` (the read counts as in flight until then).
        case readQueued(Read)
        /// Cancel these tasks.
        case cancel([Handle])
        /// Make a timer for the soonest retry (attach it with ``wakeScheduled(at:handle:)``), cancelling the
        /// one it replaces.
        case scheduleWake(Wake)
        /// Resume these waiters.
        case resume([Waiter])
    }

    /// A read of the queued records the queue has asked for: hand it back with what was read.
    struct Read: Equatable {
        /// How many rows to read: enough to fill the free slots even when every busy or skipped record
        /// comes first.
        var limit: Int
        /// Finished transfers counted when the read was asked for: a record finished after that may be
        /// shown queued by the read although it was just transferred.
        let finishedBefore: Int
    }

    /// What a change of the network's conditions calls for.
    struct NetworkChange {
        /// Interrupt the background transfers whose requirement the new conditions no longer meet (they
        /// pause: they start again, resuming, when the conditions allow).
        var actions: [Action] = []
        /// The network came back after being unreachable.
        var regained = false
        /// Transfers that could not start may start now: run a pass.
        var improved = false
    }

    typealias DownloadStep = OnDemandDownloads.Step<Handle>
    typealias Wake = RetryTimer<Handle>.Wake
    typealias ReconcileStart = ReconcileBaseline.Start
    typealias Finish = TransferFinish
}
