/// The failure decision: what becomes of a failed transfer, and how a finished transfer's outcome counts
/// for scheduling.
extension QueueStateMachine {
    /// What becomes of `record` after its transfer failed (see
    /// ``FailurePolicy/outcome(of:record:now:using:)``): to be booked by the store before
    /// ``transferFinished(_:state:outcome:)`` frees the slot.
    func failureOutcome(
        _ failure: TransferFailure, of record: AttachmentRecord, now: Int64,
        using generator: inout some RandomNumberGenerator
    ) -> FailureOutcome {
        failures.outcome(of: failure, record: record, now: now, using: &generator)
    }

    /// A transfer of `id` that ran in `state` ended as `outcome` says (booked): how that counts for
    /// scheduling (see ``Finish``). A transfer that could not reach the local files pauses the queue's
    /// transfers (``slotCount``); remote storage refusing as overloaded lowers the concurrency.
    mutating func transferFinished(
        _ id: String, state: AttachmentState, outcome: AttachmentQueue.TransferOutcome
    ) -> [Action] {
        let finish: Finish
        switch outcome {
        case .cancelled, .failed(_, .interrupted, _): finish = .cancelled
        case .completed, .superseded, .handedOff, .failedOnRequest, .failed(_, .giveUp, true): finish = .done
        case .failed(_, .wait(let reason, _, _), _):
            if reason == .localFiles { noteLocalFilesOutOfReach() }
            finish = .willRetry
        // A retry, a wait for the upload, or a give-up the store could not book (the record is as it was: it
        // must not start again before the next trigger, or a failing disk would spin it).
        case .failed(let error, _, _):
            finish = AdaptiveConcurrency.isOverload(error) ? .refused : .willRetry
        }
        return transferFinished(id, state: state, finish)
    }
}
