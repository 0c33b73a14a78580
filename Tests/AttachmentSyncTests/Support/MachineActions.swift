@testable import AttachmentSync

/// What tests read from a list of the state machine's actions (handles and waiters are numbers in tests).
extension Array where Element == QueueStateMachine<Int, Int>.Action {
    /// The transfers to start, in order.
    var start: [AttachmentRecord] {
        flatMap { action -> [AttachmentRecord] in
            if case .startTransfers(let records) = action { return records }
            return []
        }
    }

    /// The read of the queued records asked for, if any.
    var read: QueueStateMachine<Int, Int>.Read? {
        lazy.compactMap { action in
            if case .readQueued(let read) = action { return read }
            return nil
        }.first
    }

    /// The tasks to cancel.
    var cancel: [Int] {
        flatMap { action -> [Int] in
            if case .cancel(let handles) = action { return handles }
            return []
        }
    }

    /// The waiters to resume.
    var resume: [Int] {
        flatMap { action -> [Int] in
            if case .resume(let waiters) = action { return waiters }
            return []
        }
    }

    /// The retry timer to make, if any.
    var wake: QueueStateMachine<Int, Int>.Wake? {
        lazy.compactMap { action in
            if case .scheduleWake(let wake) = action { return wake }
            return nil
        }.first
    }
}
