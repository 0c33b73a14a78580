import Foundation
import Metrics
import Tracing

/// The queue's metrics (swift-metrics) and a span per transfer (swift-distributed-tracing), for a server
/// operator's dashboards and traces.
///
/// Every metric is made once, when the queue is made, from ``AttachmentQueue/Configuration/metricsFactory``
/// (or the process's `MetricsSystem.factory`): a transfer only increments what exists. Without a backend
/// (`MetricsSystem` not bootstrapped, no tracer) the handlers do nothing and no span is started, and the
/// queue-depth count, the one metric that costs a query, is never read.
struct QueueTelemetry: Sendable {
    /// The metrics of one kind of transfer.
    struct Transfers: Sendable {
        let started: Counter
        let finished: Counter
        let failed: Counter
        let gaveUp: Counter

        init(_ kind: String, factory: any MetricsFactory) {
            let dimensions = [("kind", kind)]
            started = Counter(label: "attachment_sync_transfers_started", dimensions: dimensions, factory: factory)
            finished = Counter(label: "attachment_sync_transfers_finished", dimensions: dimensions, factory: factory)
            failed = Counter(label: "attachment_sync_transfers_failed", dimensions: dimensions, factory: factory)
            gaveUp = Counter(label: "attachment_sync_transfers_given_up", dimensions: dimensions, factory: factory)
        }
    }

    let uploads: Transfers
    let downloads: Transfers
    let deletes: Transfers
    let bytesUp: Counter
    let bytesDown: Counter
    /// How long a failed transfer waits for its retry.
    let retryDelay: Metrics.Timer
    /// The concurrency limit in force (lowered while remote storage is overloaded).
    let concurrency: Gauge
    /// Records by state, refreshed at most every ``depthInterval`` when metrics are recorded.
    let depth: [AttachmentState: Gauge]
    /// Whether a metrics backend records anything (not the no-op one).
    let recordsMetrics: Bool
    /// The tracer spans go to; `nil` when none is bootstrapped or given.
    let tracer: (any Tracer)?

    /// How often the queue depth may be counted (a query over the state index).
    static let depthInterval = Duration.seconds(10)

    init(factory given: (any MetricsFactory)?, tracer givenTracer: (any Tracer)?) {
        let factory = given ?? MetricsSystem.factory
        uploads = Transfers("upload", factory: factory)
        downloads = Transfers("download", factory: factory)
        deletes = Transfers("delete", factory: factory)
        bytesUp = Counter(label: "attachment_sync_bytes", dimensions: [("direction", "up")], factory: factory)
        bytesDown = Counter(label: "attachment_sync_bytes", dimensions: [("direction", "down")], factory: factory)
        retryDelay = Metrics.Timer(label: "attachment_sync_retry_delay", factory: factory)
        concurrency = Gauge(label: "attachment_sync_concurrency_limit", factory: factory)
        var depth: [AttachmentState: Gauge] = [:]
        for state in [AttachmentState.queuedUpload, .queuedDownload, .queuedDelete, .synced, .archived] {
            depth[state] = Gauge(
                label: "attachment_sync_queue_depth", dimensions: [("state", "\(state)")], factory: factory)
        }
        self.depth = depth
        recordsMetrics = !(factory is NOOPMetricsHandler)
        let tracer = givenTracer ?? InstrumentationSystem.tracer
        self.tracer = tracer is NoOpTracer ? nil : tracer
    }

    func transfers(_ kind: AttachmentQueue.TransferKind) -> Transfers {
        switch kind {
        case .upload: uploads
        case .download: downloads
        case .delete: deletes
        }
    }

    /// Runs one transfer in a span (`attachment-sync upload`, `…download`, `…delete`, of kind client) when
    /// there is a tracer: its context is the task's while the transfer runs, so an instrumented HTTP client's
    /// spans are its children. The span names the attachment and ends with the transfer's outcome.
    func traced(
        _ kind: AttachmentQueue.TransferKind, id: String, _ transfer: () async -> TransferReport
    ) async -> TransferReport {
        transfers(kind).started.increment()
        guard let tracer else { return await transfer() }
        let span = tracer.startSpan(
            "attachment-sync \(kind)", context: ServiceContext.current ?? .topLevel, ofKind: .client)
        span.attributes["attachment_sync.attachment_id"] = id
        span.attributes["attachment_sync.kind"] = "\(kind)"
        let report = await ServiceContext.withValue(span.context) { await transfer() }
        switch report {
        case .completed(let bytes):
            span.attributes["attachment_sync.outcome"] = "completed"
            span.attributes["attachment_sync.bytes"] = bytes
        case .superseded: span.attributes["attachment_sync.outcome"] = "superseded"
        case .cancelled: span.attributes["attachment_sync.outcome"] = "cancelled"
        case .handedOff: span.attributes["attachment_sync.outcome"] = "handed_off"
        case .failed(let failure):
            span.attributes["attachment_sync.outcome"] = "failed"
            span.recordError(failure.error)
            span.setStatus(SpanStatus(code: .error))
        case .failedOnRequest(let error):
            span.attributes["attachment_sync.outcome"] = "failed"
            span.recordError(error)
            span.setStatus(SpanStatus(code: .error))
        }
        span.end()
        return report
    }

    /// Counts what a booked transfer came to.
    func record(_ outcome: AttachmentQueue.TransferOutcome, kind: AttachmentQueue.TransferKind, now: Int64) {
        let transfers = transfers(kind)
        switch outcome {
        case .completed(let bytes):
            transfers.finished.increment()
            switch kind {
            case .upload: bytesUp.increment(by: max(0, bytes))
            case .download: bytesDown.increment(by: max(0, bytes))
            case .delete: break
            }
        case .failed(_, let decision, _):
            if case .giveUp = decision {
                transfers.gaveUp.increment()
            } else {
                transfers.failed.increment()
                if let retryAt = decision.retryAt, retryAt > now {
                    let milliseconds = retryAt - now
                    retryDelay.recordNanoseconds(
                        milliseconds > Int64.max / 1_000_000 ? Int64.max : milliseconds * 1_000_000)
                }
            }
        case .failedOnRequest:
            transfers.failed.increment()
        case .superseded, .cancelled, .handedOff:
            break
        }
    }
}
