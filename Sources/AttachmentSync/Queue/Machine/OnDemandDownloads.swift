/// The downloads asked for with `download(attachmentId:)` that are in flight, and who waits for each. A
/// sub-machine of ``QueueStateMachine``: no I/O.
///
/// A caller is a token; the queue keeps each caller's continuation under its token. A download whose
/// callers all gave up is *abandoned*: it is cancelled, and a new caller waits for it to wind down, then
/// looks again (its bytes may have arrived anyway), instead of joining a transfer about to end in
/// `CancellationError`.
struct OnDemandDownloads: Sendable {
    /// The tokens waiting, by attachment id; an empty set is an abandoned download.
    private var waiting: [String: Set<Int>] = [:]
    private var lastToken = 0

    /// Whether a download of `id` asked for is in flight (abandoned or not).
    func isInFlight(_ id: String) -> Bool { waiting[id] != nil }

    /// Whether a download of `id` asked for is in flight and some caller still waits for it.
    func isWanted(_ id: String) -> Bool { !(waiting[id]?.isEmpty ?? true) }

    /// How many callers wait for the download of `id`.
    func waiterCount(of id: String) -> Int { waiting[id]?.count ?? 0 }

    /// A caller waits for the download of `id` (in flight, or about to start): its token.
    mutating func join(_ id: String) -> Int {
        lastToken += 1
        waiting[id, default: []].insert(lastToken)
        return lastToken
    }

    /// The caller with `token` stopped waiting: `true` when that leaves the download abandoned (to cancel).
    mutating func leave(_ token: Int, of id: String) -> Bool {
        guard waiting[id]?.remove(token) != nil else { return false }
        return waiting[id]?.isEmpty == true
    }

    /// The download of `id` ended: the tokens still waiting, to hand its result (in the order they came).
    mutating func ended(_ id: String) -> [Int] {
        (waiting.removeValue(forKey: id) ?? []).sorted()
    }

    // MARK: - A caller asks

    /// What a `download(attachmentId:)` call does after reading the record.
    enum Step<Handle> {
        /// The content is on this device: return it.
        case present(AttachmentRecord)
        /// Wait for the download in flight, as the caller with this token.
        case join(Int)
        /// Another transfer of the attachment is in flight (an upload, an eager download, an abandoned
        /// download winding down): await its task, then read the record and ask again.
        case awaitTransfer(Handle)
        /// Cancel the `pausing` tasks (a lower-priority transfer gives up its slot and runs again after),
        /// start a download of the record, attach its task with
        /// ``QueueStateMachine/startedOnRequest(_:state:handle:)``, and wait for it as the caller with this
        /// token.
        case start(AttachmentRecord, token: Int, pausing: [Handle])
        /// The call fails.
        case refuse(Refusal)
    }

    /// Why a `download(attachmentId:)` call fails before any transfer.
    enum Refusal: Equatable, Sendable {
        /// No attachment has the id.
        case notFound
        /// The attachment is being deleted.
        case beingDeleted
        /// A save holds the id.
        case beingSaved
        /// The network is unreachable, as last told.
        case networkUnreachable
    }

    /// A caller read `record` of `id` (`nil`: no such attachment): its next step, with `slots` (whose
    /// lowest-priority background transfer pauses when every slot is taken and a download starts).
    mutating func asked<Handle>(
        _ id: String, record: AttachmentRecord?, slots: inout TransferSlots<Handle>
    ) -> Step<Handle> {
        guard let record else { return .refuse(.notFound) }
        if record.state == .queuedDelete { return .refuse(.beingDeleted) }
        if record.localPath != nil { return .present(record) }
        if isWanted(id) { return .join(join(id)) }
        let inFlight = slots.transfers[id]?.handle
        if isInFlight(id), let inFlight { return .awaitTransfer(inFlight) }
        if slots.reserved.contains(id) { return .refuse(.beingSaved) }
        if let inFlight { return .awaitTransfer(inFlight) }
        guard slots.network.isReachable else { return .refuse(.networkUnreachable) }
        // Priority 4: above every background transfer (see ``TransferPriority``).
        let paused = slots.pauseTransfer(for: 4)
        return .start(record, token: join(id), pausing: paused.map { [$0.handle] } ?? [])
    }
}
