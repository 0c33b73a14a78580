@testable import AttachmentSync

/// What tests read from a list of the state machine's actions (handles and waiters are numbers in tests).
extension Array where Element == QueueStateMachine<Int, Int>.Action {
    /// The transfers to start, in order.
    var start: [AttachmentRecord] {
        values {
            if case .startTransfers(let records) = $0 { records } else { nil }
        }
    }

    /// The read of the queued records asked for, if any.
    var read: QueueStateMachine<Int, Int>.Read? {
        values {
            if case .readQueued(let read) = $0 { [read] } else { nil }
        }.first
    }

    /// The tasks to cancel.
    var cancel: [Int] {
        values {
            if case .cancel(let handles) = $0 { handles } else { nil }
        }
    }

    /// The waiters to resume.
    var resume: [Int] {
        values {
            if case .resume(let waiters) = $0 { waiters } else { nil }
        }
    }

    /// The retry timer to make, if any.
    var wake: QueueStateMachine<Int, Int>.Wake? {
        values {
            if case .scheduleWake(let wake) = $0 { [wake] } else { nil }
        }.first
    }

    /// What `extract` takes out of each action, in order.
    private func values<T>(_ extract: (Element) -> [T]?) -> [T] {
        flatMap { extract($0) ?? [] }
    }
}
