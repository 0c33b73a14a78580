import Foundation

/// What becomes of each transfer handed to a ``BackgroundTransferService``, given the queue's records of its
/// hand-offs and what the service says: pure, no I/O; the queue carries the steps out.
///
/// Each result is adopted at most once because adoption removes the record in the transaction that books
/// it: a result without a record was adopted already (or its record was found forgotten), and is only
/// acknowledged. A record without a result that the service does not run either was never handed over (the
/// process died between writing it and handing it) or was lost by the service; after `grace` it is
/// recovered: an upload is first looked for on the remote (it may have been stored before the report was
/// lost), a download is queued again.
enum HandOffPolicy {
    /// One step for the queue.
    enum Step: Equatable, Sendable {
        /// The upload got a response that may mean it is stored (2xx, or 412 from a create-only request: an
        /// object is there): confirm what the remote holds, then book it (or its failure) and remove the
        /// record; then acknowledge.
        case confirmUpload(HandOffStore.HandOff, BackgroundTransferResult)
        /// The download got a 2xx and a body file: verify it and commit it like an in-process download,
        /// removing the record in the commit; then acknowledge.
        case adoptDownload(HandOffStore.HandOff, BackgroundTransferResult)
        /// The transfer failed (no response, or a status that is no success): remove the record and book the
        /// failure (the attachment is queued again, under the failure policy); then acknowledge.
        case failed(HandOffStore.HandOff, BackgroundTransferResult)
        /// A result with no record: acknowledge it (its body file goes with it).
        case acknowledge(BackgroundTransferResult)
        /// A record the service neither runs nor reported, past the grace period: recover it.
        case recover(HandOffStore.HandOff)
    }

    /// The steps for `records` given the service's `running` ids and its `results`. `handing` are the ids
    /// this process is handing over right now (their records are written, the service may not know them
    /// yet); a record younger than `grace` (milliseconds, against `now`) is left alone too. Steps come in
    /// the order of the results, then of the records.
    static func steps(
        records: [HandOffStore.HandOff], running: Set<String>, results: [BackgroundTransferResult],
        handing: Set<String>, now: Int64, grace: Int64
    ) -> [Step] {
        let byId = Dictionary(records.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        var steps: [Step] = []
        var reported: Set<String> = []
        for result in results where reported.insert(result.id).inserted {
            guard let record = byId[result.id] else {
                steps.append(.acknowledge(result))
                continue
            }
            steps.append(step(for: record, result))
        }
        for record in records
        where !reported.contains(record.id) && !running.contains(record.id) && !handing.contains(record.id)
            && now.addingClamped(-record.createdAt) >= grace
        {
            steps.append(.recover(record))
        }
        return steps
    }

    /// The step for a result that has its record.
    static func step(for record: HandOffStore.HandOff, _ result: BackgroundTransferResult) -> Step {
        guard let status = result.statusCode else { return .failed(record, result) }
        switch record.direction {
        case .upload:
            return (200..<300).contains(status) || status == 412
                ? .confirmUpload(record, result) : .failed(record, result)
        case .download:
            return (200..<300).contains(status) && result.bodyFile != nil
                ? .adoptDownload(record, result) : .failed(record, result)
        }
    }
}
