import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// Reconciling only the ids that joined, left or changed (after the first emission) must decide exactly
/// what comparing the whole table would.
@Suite("Incremental reconcile", .cleansUp)
struct IncrementalReconcileTests {
    @Test("the scope is everything without a previous emission, else joined, left and changed ids")
    func scope() {
        #expect(Reconciler.Scope(previous: nil, current: ["a"], changed: []) == .everything)
        // One left, or one joined: only that one, plus the changed ones.
        #expect(
            Reconciler.Scope(previous: ["a", "b", "c", "d"], current: ["a", "c", "d"], changed: ["x"])
                == .ids(["b", "x"]))
        #expect(
            Reconciler.Scope(previous: ["a", "b", "c"], current: ["a", "b", "n", "c"], changed: []) == .ids(["n"]))
        // Changes in two places: everything between them is looked at (a superset is safe).
        #expect(
            Reconciler.Scope(previous: ["a", "b", "c", "d"], current: ["a", "c", "d", "e"], changed: [])
                == .ids(["b", "c", "d", "e"]))
        // A middle part beyond the limit (rows reordered): the exact difference.
        let ids = (0..<5000).map { "i\($0)" }
        #expect(
            Reconciler.Scope(previous: ids, current: ids.reversed() + ["new"], changed: [])
                == .ids(["new"]))
        #expect(Reconciler.Scope(previous: ["a"], current: ["a"], changed: []).isEmpty)
    }

    @Test("scoped decisions equal whole-table decisions over 500 random histories", arguments: [true, false])
    func scopedEqualsWhole(downloadAttachments: Bool) throws {
        let reconciler = Reconciler(policy: downloadAttachments ? .eager : .onDemand)
        var random = SplitMix64(seed: downloadAttachments ? 1 : 2)
        let universe = (0..<40).map { "id\($0)" }
        for history in 0..<500 {
            // A table that the previous emission was reconciled with: whole-table decisions applied.
            var records = randomRecords(universe, &random)
            let previous = randomWatch(universe, &random)
            apply(reconciler.reconcile(items: try items(previous), records: records), to: &records)
            #expect(reconciler.reconcile(items: try items(previous), records: records).isEmpty, "history \(history)")

            // Then the queue changes some records (transfers, saves, deletes, evictions) and rows change.
            var changed: Set<String> = []
            for id in universe where random.next(below: 8) == 0 {
                changed.insert(id)
                if random.next(below: 4) == 0 {
                    records[id] = nil
                } else {
                    records[id] = randomRecord(id, &random)
                }
            }
            let current = randomWatch(universe, &random, startingFrom: previous)

            let wasWatched: (String) -> Bool = { previous.contains($0) }
            let whole = reconciler.reconcile(items: try items(current), records: records, previouslyWatched: wasWatched)
            // Half the time by the exact set difference, as for reordered rows.
            let scope = Reconciler.Scope(
                previous: previous, current: current, changed: changed,
                middleLimit: history.isMultiple(of: 2) ? Reconciler.Scope.middleLimit : 0)
            guard case .ids(let ids) = scope else {
                Issue.record("a previous emission gives a scope of ids")
                return
            }
            let scoped = reconciler.reconcile(
                items: scope.items(of: try items(current)), records: records.filter { ids.contains($0.key) },
                previouslyWatched: wasWatched)
            #expect(scoped == whole, "history \(history)")
        }
    }

    @Test("an upload no row refers to is archived at the next emission, even one about other rows")
    func unreferencedUploadArchivedOnLaterEmission() async throws {
        let device = try QueueHarness(watch: true)
        let remote = try device.memoryRemote
        await remote.hold()
        try await device.queue.startSync()
        // No checklist refers to this file: the hook inserts nothing.
        let orphan = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        await remote.waitForInFlight(count: 1)
        // An emission while it uploads leaves it alone (it is waiting for upload).
        try await device.addChecklist("c1", photo: nil)
        await remote.release()
        try await device.waitForState(orphan.id, .synced)

        // An emission about another photo only (the watch emits only when its result changes): it must
        // still look at the uploaded record.
        await remote.setFile(testBytes(5), named: "other.jpg")
        try await device.addChecklist("c2", photo: "other")
        try await device.waitForState("other", .synced)
        try await device.waitForState(orphan.id, .archived)
        #expect(device.bytesOnDisk("\(orphan.id).jpg") == testBytes(10), "archived content stays cached")
        #expect(await remote.file(named: "\(orphan.id).jpg") == testBytes(10))
    }

    @Test("a watched download given up by the error handler stays given up across emissions until retried")
    func givenUpDownloadWaitsForRetry() async throws {
        let device = try QueueHarness(watch: true, errorHandler: GiveUpOnDownloads())
        let remote = try device.memoryRemote
        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: "p1")
        // Not on the remote yet: the download fails and the handler gives it up.
        try await device.waitForState("p1", .archived)
        #expect(try await device.queue.attachment(id: "p1")?.givenUp == .queuedDownload)

        // Emissions about other rows do not bring it back (no retry loop behind the handler's back).
        await remote.setFile(testBytes(64, seed: 3), named: "p1.jpg")
        await remote.setFile(testBytes(5), named: "p2.jpg")
        try await device.addChecklist("c2", photo: "p2")
        try await device.waitForState("p2", .synced)
        try await device.queue.syncNow()
        #expect(try await device.state(of: "p1") == .archived)
        #expect(await remote.downloadCount == 2, "p1 once, p2 once")

        // The app asks: it is downloaded.
        try await device.queue.retry(attachmentId: "p1")
        try await device.waitForState("p1", .synced)
        #expect(device.bytesOnDisk("p1.jpg") == testBytes(64, seed: 3))
        #expect(try await device.queue.attachment(id: "p1")?.givenUp == nil)
    }

    @Test("clearQueue makes the next emission compare the whole table")
    func clearQueueResetsTheBaseline() async throws {
        let device = try QueueHarness(watch: true)
        let remote = try device.memoryRemote
        await remote.setFile(testBytes(20), named: "p1.jpg")
        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: "p1")
        try await device.waitForState("p1", .synced)

        try await device.queue.clearQueue()
        #expect(try await device.state(of: "p1") == nil)
        // p1 is still referred to: the next emission, though only about p2, brings its record back.
        await remote.setFile(testBytes(5), named: "p2.jpg")
        try await device.addChecklist("c2", photo: "p2")
        try await device.waitForState("p1", .synced)
        #expect(device.bytesOnDisk("p1.jpg") == testBytes(20))
        #expect(await remote.downloadCount == 3)
    }

    @Test("more than one batch of changed ids (over 500) is reconciled")
    func manyChangedIds() async throws {
        let device = try QueueHarness(watch: true) {
            $0.downloadAttachments = false
            $0.archivedCacheLimit = 5000  // no eviction: the archived records are counted below
        }
        // 1,200 synced records, each referred to by a row, and one record no row refers to.
        try await device.db.writeTransaction { tx in
            let insert = "INSERT INTO attachments (id, filename, state, timestamp, has_synced) VALUES (?, ?, 3, ?, 1)"
            for index in 0..<1200 {
                try tx.execute(sql: insert, parameters: ["m\(index)", "m\(index).jpg", index])
                try tx.execute(
                    sql: "INSERT INTO checklists (id, photo_id) VALUES (?, ?)", parameters: ["k\(index)", "m\(index)"])
            }
            try tx.execute(sql: insert, parameters: ["unreferenced", "unreferenced.jpg", 5000])
        }
        try await device.queue.startSync()
        // The first emission is compared with the whole table: once the unreferenced one is archived, it
        // has been reconciled, and every m record was left alone.
        try await device.waitForState("unreferenced", .archived)
        #expect(try await device.state(of: "m0") == .synced)

        try await device.db.execute(sql: "DELETE FROM checklists")
        for index in [0, 499, 500, 1199] { try await device.waitForState("m\(index)", .archived) }
        let archived = try await device.db.get(sql: "SELECT count(*) AS n FROM attachments WHERE state = 4") {
            try $0.getInt(name: "n")
        }
        #expect(archived == 1201)
    }

    // MARK: Helpers

    private struct GiveUpOnDownloads: SyncErrorHandler {
        func onDownloadError(attachment: AttachmentSync.Attachment, error: any Error) async -> Bool { false }
        func onUploadError(attachment: AttachmentSync.Attachment, error: any Error) async -> Bool { true }
        func onDeleteError(attachment: AttachmentSync.Attachment, error: any Error) async -> Bool { true }
    }

    private func items(_ ids: [String]) throws -> [WatchedAttachmentItem] {
        try ids.map { try WatchedAttachmentItem(id: $0, fileExtension: "jpg") }
    }

    private func randomWatch(_ universe: [String], _ random: inout SplitMix64, startingFrom base: [String]? = nil)
        -> [String]
    {
        guard let base else { return universe.filter { _ in random.next(below: 2) == 0 } }
        var watch = base.filter { _ in random.next(below: 6) != 0 }
        watch += universe.filter { !base.contains($0) && random.next(below: 6) == 0 }
        if let first = watch.first, random.next(below: 5) == 0 { watch.append(first) }  // a duplicate row
        if random.next(below: 4) == 0 {  // rows in another order
            for index in watch.indices.reversed() {
                watch.swapAt(index, Int(random.next(below: UInt64(index + 1))))
            }
        }
        return watch
    }

    private func randomRecords(_ universe: [String], _ random: inout SplitMix64) -> [String: AttachmentRecord] {
        var records: [String: AttachmentRecord] = [:]
        for id in universe where random.next(below: 3) != 0 { records[id] = randomRecord(id, &random) }
        return records
    }

    private func randomRecord(_ id: String, _ random: inout SplitMix64) -> AttachmentRecord {
        let state = AttachmentState(rawValue: Int(random.next(below: 5)))!
        var record = AttachmentRecord(
            id: id, filename: "\(id).jpg", state: state, timestamp: Int64(random.next(below: 1000)),
            hasSynced: random.next(below: 3) != 0, localPath: random.next(below: 2) == 0 ? "\(id).jpg" : nil)
        if state == .archived, random.next(below: 4) == 0 {
            record.givenUp = AttachmentState(rawValue: Int(random.next(below: 3)))
        }
        return record
    }

    /// Applies a decision as the queue's write transaction does.
    private func apply(_ decision: Reconciler.Decision, to records: inout [String: AttachmentRecord]) {
        for record in decision.inserts { records[record.id] = record }
        for id in decision.restores { records[id]?.state = .synced }
        for id in decision.reuploads {
            records[id]?.state = .queuedUpload
            records[id]?.givenUp = nil
        }
        for record in decision.requeues {
            records[record.id] = record
            records[record.id]?.givenUp = nil
        }
        for archive in decision.archives { records[archive.id]?.state = .archived }
    }
}
