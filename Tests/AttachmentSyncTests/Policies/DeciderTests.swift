import AttachmentSyncTesting
import Foundation
import Testing

@testable import AttachmentSync

@Suite("Reconciler and scheduler (pure, .cleansUp)")
struct DeciderTests {
    func record(
        _ id: String, _ state: AttachmentState, local: Bool = true, hasSynced: Bool = false, at timestamp: Int64 = 1
    ) -> AttachmentRecord {
        AttachmentRecord(
            id: id, filename: "\(id).jpg", state: state, timestamp: timestamp, hasSynced: hasSynced,
            localPath: local ? "\(id).jpg" : nil)
    }

    @Test("new ids are inserted, unwatched synced and queued downloads archived, uploads and deletes left alone")
    func reconcileTable() throws {
        let records = [
            "synced-gone": record("synced-gone", .synced),
            "download-gone": record("download-gone", .queuedDownload, local: false),
            "upload-gone": record("upload-gone", .queuedUpload),
            "delete-gone": record("delete-gone", .queuedDelete, local: false),
            "archived-cached": record("archived-cached", .archived, hasSynced: true),
            "archived-local-only": record("archived-local-only", .archived),
            "archived-evicted": record("archived-evicted", .archived, local: false),
            "kept": record("kept", .synced),
        ]
        let items = try ["new", "archived-cached", "archived-local-only", "archived-evicted", "kept", "new"].map {
            try WatchedAttachmentItem(id: $0, fileExtension: "jpg")
        }
        let decision = Reconciler(policy: .eager).reconcile(items: items, records: records)
        #expect(decision.inserts.map(\.id) == ["new"])
        #expect(decision.inserts.first?.state == .queuedDownload)
        #expect(decision.restores == ["archived-cached"])
        // Cached content that never reached remote storage (an upload given up) is uploaded, never "synced".
        #expect(decision.reuploads == ["archived-local-only"])
        #expect(decision.requeues.map(\.id) == ["archived-evicted"])
        #expect(Set(decision.archives.map(\.id)) == ["synced-gone", "download-gone"])

        // On demand: new and evicted ones become remote-only synced records, not downloads.
        let onDemand = Reconciler(policy: .onDemand).reconcile(items: items, records: records)
        #expect(onDemand.inserts.map(\.id) == ["new"])
        #expect(onDemand.inserts.first?.state == .synced)
        #expect(onDemand.inserts.first?.onDemand == true)
        #expect(onDemand.inserts.first?.localPath == nil)
        #expect(onDemand.requeues.map(\.id) == ["archived-evicted"])
        #expect(onDemand.requeues.first?.state == .synced)
        #expect(onDemand.restores == ["archived-cached"])
        #expect(onDemand.reuploads == ["archived-local-only"])
    }

    @Test("bad names are rejected with the reason, not inserted")
    func reconcileRejects() throws {
        let items = try [
            WatchedAttachmentItem(id: "../x", fileExtension: "jpg"),
            WatchedAttachmentItem(id: "ok", filename: "a/b.jpg"),
        ]
        let decision = Reconciler(policy: .eager).reconcile(items: items, records: [:])
        #expect(decision.inserts.isEmpty)
        #expect(decision.rejected.map(\.error.code) == [.invalidName, .invalidName])
    }

    @Test("the scheduler fills free slots oldest first, skipping busy and failed-in-the-same-state ids")
    func scheduler() {
        let queued = (1...6).map { record("r\($0)", $0 == 4 ? .queuedDelete : .queuedUpload, at: Int64($0)) }
        let selected = TransferScheduler(maxConcurrentTransfers: 3).select(
            queued: queued, busy: ["r1"], inFlight: 1, skipped: ["r2": .queuedUpload, "r4": .queuedUpload], now: 0)
        #expect(selected.map(\.id) == ["r3", "r4"])
        #expect(
            TransferScheduler(maxConcurrentTransfers: 2).select(
                queued: queued, busy: [], inFlight: 2, skipped: [:], now: 0
            ).isEmpty)
    }

    @Test("the scheduler never exceeds its bound, never picks one id twice, and waits for retry times")
    func schedulerBoundsAndBackoff() {
        var queued = (1...20).map { record("r\($0)", .queuedUpload, at: Int64($0)) }
        queued[0].nextAttemptAt = 5_000
        queued[1].nextAttemptAt = 1_000
        queued.append(queued[5])  // the same id listed twice
        let scheduler = TransferScheduler(maxConcurrentTransfers: 8)
        for inFlight in 0...8 {
            let picked = scheduler.select(queued: queued, busy: [], inFlight: inFlight, skipped: [:], now: 1_000)
            #expect(picked.count == 8 - inFlight)
            #expect(Set(picked.map(\.id)).count == picked.count, "one transfer per attachment")
            #expect(!picked.contains { $0.id == "r1" }, "r1 waits until 5,000")
        }
        let first = scheduler.select(queued: queued, busy: [], inFlight: 0, skipped: [:], now: 1_000)
        #expect(first.map(\.id) == ["r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9"], "oldest first, r2 due at 1,000")
        let later = scheduler.select(queued: queued, busy: [], inFlight: 7, skipped: [:], now: 5_000)
        #expect(later.map(\.id) == ["r1"])
    }
}
