import AttachmentSync
import Foundation

/// The chunks of a response body received and not yet read, in order, with at most `limit` bytes in memory.
///
/// The delegate queue appends (never waiting for the reader); the reader takes. When the reader falls
/// behind by more than `limit` bytes, the ``Overflow`` policy applies:
/// - ``Overflow/suspendTask`` (Apple platforms): the task is suspended ("a task, while suspended, produces
///   no network traffic", Apple's `URLSessionTask.suspend()` documentation) and resumed once the reader has
///   taken the buffer down to half the limit. Chunks already on their way still arrive and are kept, so
///   memory may pass the limit by what was in flight.
/// - ``Overflow/spillToDisk`` (Linux): swift-corelibs-foundation's `suspend()` takes the transfer's curl
///   handle out of its multi handle and `resume()` puts it back, which starts the request over (seen here:
///   a 32 MiB GET suspended and resumed delivered two responses and 51.7 MB). Chunks past the limit are
///   written to a temporary file instead, and read back in order: memory stays under `limit`, the network
///   is not slowed.
final class URLSessionResponseBuffer: Sendable {
    enum Overflow: Sendable {
        case suspendTask, spillToDisk

        /// The policy that works on this platform.
        static var platformDefault: Overflow {
            #if canImport(Darwin)
                .suspendTask
            #else
                .spillToDisk
            #endif
        }
    }

    /// What the exchange must do to its task.
    enum FlowAction: Sendable {
        case suspend, resume
        case cancel(any Error)
    }

    private struct State {
        var chunks: [Data] = []
        var memoryBytes = 0
        var spill: SpillFile?
        /// Spill-file bytes: reserved by the writer, written, taken by the reader.
        var spillReserved: Int64 = 0
        var spillWritten: Int64 = 0
        var spillRead: Int64 = 0
        var suspended = false
        /// How the body ended (`nil` error: at its end), once the task completed.
        var ended: Result<Void, any Error>?
        /// Set when the request was ended from this side: what was buffered is dropped.
        var failure: (any Error)?
        var changes = 0
        var waiter: CheckedContinuation<Void, Never>?
    }

    let limit: Int
    let overflow: Overflow
    let statistics: URLSessionEngineStatistics
    private let state = LockedValue(State())

    init(limit: Int, overflow: Overflow = .platformDefault, statistics: URLSessionEngineStatistics) {
        self.limit = max(1, limit)
        self.overflow = overflow
        self.statistics = statistics
    }

    /// Whether the body was read to its end (or failed): nothing more will come.
    var isFinished: Bool {
        state.withLock { state in
            state.failure != nil
                || (state.ended != nil && state.chunks.isEmpty && state.spillRead == state.spillWritten)
        }
    }

    /// Adds a received chunk (on the delegate queue); returns what to do to the task.
    func append(_ data: Data) -> FlowAction? {
        guard !data.isEmpty else { return nil }
        enum Placement {
            case memory
            case spill(at: Int64, SpillFile?)
            case dropped
        }
        var action: FlowAction?
        let (placement, waiter) = state.withLock { state -> (Placement, CheckedContinuation<Void, Never>?) in
            guard state.failure == nil, state.ended == nil else { return (.dropped, nil) }
            let spillDrained = state.spillReserved == state.spillRead
            if overflow == .suspendTask || (spillDrained && state.memoryBytes + data.count <= limit) {
                state.chunks.append(data)
                state.memoryBytes += data.count
                statistics.recordBuffered(state.memoryBytes)
                if overflow == .suspendTask, state.memoryBytes > limit, !state.suspended {
                    state.suspended = true
                    action = .suspend
                }
                state.changes += 1
                defer { state.waiter = nil }
                return (.memory, state.waiter)
            }
            let offset = state.spillReserved
            state.spillReserved += Int64(data.count)
            return (.spill(at: offset, state.spill), nil)
        }
        waiter?.resume()
        guard case .spill(let offset, let existing) = placement else { return action }
        do {
            let spill = try existing ?? SpillFile()
            if existing == nil { state.withLock { $0.spill = spill } }
            try spill.write(data, at: offset)
            statistics.recordSpilled(data.count)
        } catch {
            return .cancel(error)
        }
        let wake = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.spillWritten = offset + Int64(data.count)
            state.changes += 1
            defer { state.waiter = nil }
            return state.waiter
        }
        wake?.resume()
        return nil
    }

    /// The task completed: `error` is `nil` when the body arrived whole.
    func finish(_ error: (any Error)?) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if state.ended == nil { state.ended = error.map { .failure($0) } ?? .success(()) }
            state.changes += 1
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// The request was ended from this side: buffered bytes are dropped, the reader gets `error`.
    func fail(_ error: any Error) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if state.failure == nil { state.failure = error }
            state.chunks = []
            state.memoryBytes = 0
            state.spill?.remove()
            state.changes += 1
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// The next chunk (`nil` at the end), and what to do to the task. Waits while nothing is buffered. Only one
    /// reader at a time (a body is read once).
    func next() async throws -> (Data?, FlowAction?) {
        // Each turn either returns or waits for a change (a chunk, a spill write, the end or a failure); the
        // task completes after finitely many changes.
        while true {
            enum Step {
                case chunk(Data, FlowAction?)
                case readSpill(SpillFile, Int64, Int)
                case end
                case wait(Int)
            }
            let step = try state.withLock { state -> Step in
                if let failure = state.failure { throw failure }
                if !state.chunks.isEmpty {
                    let chunk = state.chunks.removeFirst()
                    state.memoryBytes -= chunk.count
                    var action: FlowAction?
                    if state.suspended, state.memoryBytes <= limit / 2 {
                        state.suspended = false
                        action = .resume
                    }
                    return .chunk(chunk, action)
                }
                if state.spillRead < state.spillWritten, let spill = state.spill {
                    let count = Int(min(Int64(URLSessionSpillChunk.size), state.spillWritten - state.spillRead))
                    defer { state.spillRead += Int64(count) }
                    return .readSpill(spill, state.spillRead, count)
                }
                if state.spillReserved == state.spillWritten, let ended = state.ended {
                    state.spill?.remove()
                    try ended.get()
                    return .end
                }
                return .wait(state.changes)
            }
            switch step {
            case .chunk(let data, let action): return (data, action)
            case .end: return (nil, nil)
            case .readSpill(let spill, let offset, let count):
                let data = try spill.read(at: offset, count: count)
                if let failure = state.withLock({ $0.failure }) { throw failure }
                return (data, nil)
            case .wait(let seen):
                await withCheckedContinuation { continuation in
                    let now = state.withLock { state -> Bool in
                        guard state.changes == seen else { return true }
                        state.waiter = continuation
                        return false
                    }
                    if now { continuation.resume() }
                }
            }
        }
    }
}

enum URLSessionSpillChunk {
    /// How much is read back from a spill file at once: 256 KiB.
    static let size = 256 * 1024
}

/// Counters an engine keeps across its requests, for tests and diagnostics.
package final class URLSessionEngineStatistics: Sendable {
    package struct Snapshot: Sendable {
        /// The most response-body bytes any request held in memory at once.
        package var maximumBufferedBytes = 0
        /// How many response-body bytes went through a spill file.
        package var spilledBytes: Int64 = 0
        /// How many requests' tasks have completed (whole, failed or cancelled).
        package var completedRequests = 0
        /// How many file bodies were sent from a temporary copy (a range too long to hold in memory).
        package var temporaryCopies = 0
    }

    private struct State {
        var snapshot = Snapshot()
        var waiters: [(condition: @Sendable (Snapshot) -> Bool, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state = LockedValue(State())

    package var snapshot: Snapshot { state.withLock { $0.snapshot } }

    /// Returns once `condition` holds (checked after every change; no polling).
    package func waitUntil(_ condition: @escaping @Sendable (Snapshot) -> Bool) async {
        await withCheckedContinuation { continuation in
            let holds = state.withLock { state -> Bool in
                guard !condition(state.snapshot) else { return true }
                state.waiters.append((condition, continuation))
                return false
            }
            if holds { continuation.resume() }
        }
    }

    func recordBuffered(_ bytes: Int) {
        update { $0.maximumBufferedBytes = max($0.maximumBufferedBytes, bytes) }
    }

    func recordSpilled(_ bytes: Int) {
        update { $0.spilledBytes += Int64(bytes) }
    }

    func recordTemporaryCopy() {
        update { $0.temporaryCopies += 1 }
    }

    func recordCompleted() {
        update { $0.completedRequests += 1 }
    }

    private func update(_ change: (inout Snapshot) -> Void) {
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            change(&state.snapshot)
            let snapshot = state.snapshot
            let ready = state.waiters.filter { $0.condition(snapshot) }.map(\.continuation)
            state.waiters.removeAll { $0.condition(snapshot) }
            return ready
        }
        for continuation in ready { continuation.resume() }
    }
}
