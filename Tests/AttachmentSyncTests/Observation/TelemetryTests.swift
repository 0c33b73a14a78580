import AttachmentSync
import AttachmentSyncTesting
import Foundation
import InMemoryTracing
import Metrics
import MetricsTestKit
import TestSupport
import Testing
import Tracing

/// The queue's metrics and spans, through the factory and tracer of its configuration (the process's
/// `MetricsSystem` and `InstrumentationSystem` can be bootstrapped only once).
@Suite("Metrics and transfer spans", .cleansUp)
struct TelemetryTests {
    @Test("uploads, a failure and its retry, a download and a delete are counted, timed and traced")
    func countsAndTraces() async throws {
        let metrics = TestMetrics()
        let tracer = InMemoryTracer()
        let device = try QueueHarness(watch: true) { configuration in
            configuration.metricsFactory = metrics
            configuration.tracer = tracer
            configuration.retryBackoff = RetryBackoff(
                initialDelay: .seconds(5), maximumDelay: .seconds(5), jitter: false)
        }
        let remote = try device.memoryRemote
        await remote.failNext(.upload, count: 1, with: InjectedFailure("rejected once"))
        let first = try await device.queue.saveFile(data: testBytes(1_000), mediaType: nil, fileExtension: "jpg")
        try await device.addChecklist("c1", photo: first.id)
        try await device.queue.syncNow()
        #expect(try await device.state(of: first.id) == .queuedUpload)
        await device.clock.advance(by: .seconds(6))
        try await device.queue.syncNow()
        #expect(try await device.state(of: first.id) == .synced)
        let second = try await device.queue.saveFile(data: testBytes(3_000), mediaType: nil, fileExtension: "jpg")
        await remote.setFile(testBytes(2_500, seed: 7), named: "p3.jpg")
        try await device.addChecklist("c3", photo: "p3")
        try await device.queue.startSync()
        try await device.waitForState("p3", .synced)
        try await device.queue.syncNow()
        _ = try await device.queue.deleteFile(attachmentId: second.id)
        try await device.queue.syncNow()

        func counter(_ label: String, _ kind: String) throws -> Int64 {
            try metrics.expectCounter(label, [("kind", kind)]).totalValue
        }
        #expect(try counter("attachment_sync_transfers_started", "upload") == 3)
        #expect(try counter("attachment_sync_transfers_finished", "upload") == 2)
        #expect(try counter("attachment_sync_transfers_failed", "upload") == 1)
        #expect(try counter("attachment_sync_transfers_started", "download") == 1)
        #expect(try counter("attachment_sync_transfers_finished", "download") == 1)
        #expect(try counter("attachment_sync_transfers_finished", "delete") == 1)
        #expect(try metrics.expectCounter("attachment_sync_bytes", [("direction", "up")]).totalValue == 4_000)
        #expect(try metrics.expectCounter("attachment_sync_bytes", [("direction", "down")]).totalValue == 2_500)
        #expect(try metrics.expectTimer("attachment_sync_retry_delay").values == [5_000_000_000])
        #expect(try metrics.expectGauge("attachment_sync_concurrency_limit").lastValue == 4)
        // Counted at the first pass (one upload queued), then not again within 10 seconds; 11 seconds later,
        // at the next pass.
        let queuedUploads = try metrics.expectGauge("attachment_sync_queue_depth", [("state", "queuedUpload")])
        #expect(queuedUploads.values == [1])
        await device.clock.advance(by: .seconds(11))
        try await device.queue.syncNow()
        #expect(queuedUploads.values == [1, 0])
        #expect(try metrics.expectGauge("attachment_sync_queue_depth", [("state", "synced")]).lastValue == 2)

        let spans = tracer.finishedSpans
        #expect(
            spans.map(\.operationName).sorted() == [
                "attachment-sync delete", "attachment-sync download", "attachment-sync upload",
                "attachment-sync upload",
                "attachment-sync upload",
            ])
        let failed = spans.filter { $0.status?.code == .error }
        #expect(failed.count == 1)
        #expect(failed.first?.errors.map { "\($0.error)" } == ["\(InjectedFailure("rejected once"))"])
        #expect(failed.first?.attributes["attachment_sync.attachment_id"]?.toSpanAttribute() == .string(first.id))
        let download = try #require(spans.first { $0.operationName == "attachment-sync download" })
        #expect(download.attributes["attachment_sync.bytes"]?.toSpanAttribute() == .int64(2_500))
        #expect(download.attributes["attachment_sync.outcome"]?.toSpanAttribute() == .string("completed"))
        #expect(spans.allSatisfy { $0.kind == .client })
    }
}
