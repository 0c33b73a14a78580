import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// The hand-off records: written before a transfer is handed over, deleted once by the adoption of its
/// result, kept across a restart.
@Suite("Hand-off records")
struct HandOffStoreTests {
    static func handOff(_ id: String, attachment: String, at time: Int64) -> HandOffStore.HandOff {
        HandOffStore.HandOff(
            id: id, attachmentId: attachment, direction: .upload,
            request: PreparedRequest(
                method: "PUT", url: URL(string: "https://s3.example.com/bucket/\(attachment).jpg?X-Amz-Signature=ab")!,
                headers: [
                    .init(name: "Content-MD5", value: "1B2M2Y8AsgTpgAmY7PhCfg=="),
                    .init(name: "If-None-Match", value: "*"),
                ]),
            bodyFileName: "\(attachment).jpg", expectedSize: 42, sha256: String(repeating: "a", count: 64),
            createdAt: time)
    }

    @Test("a record reads back as written, survives reopening the database, and is removed exactly once")
    func recordsAreDurableAndRemovedOnce() async throws {
        let folder = try TemporaryDirectory()
        let path = folder.path("app.sqlite")
        let store = HandOffStore(scope: "attachments")
        let first = Self.handOff("h1", attachment: "a", at: 2)
        let second = Self.handOff("h2", attachment: "b", at: 1)
        do {
            let db = try LocalDatabase(path: path, schema: QueueHarness.schema)
            try await db.writeTransaction { tx in
                try store.createTable(in: tx)
                #expect(try store.record(first, in: tx))
                #expect(try store.record(second, in: tx))
            }
            try await db.close()
        }
        let db = try LocalDatabase(path: path, schema: QueueHarness.schema)
        try await db.writeTransaction { tx in
            try store.createTable(in: tx)
            #expect(try store.handOffs(in: tx) == [second, first], "oldest first")
            #expect(try store.handOff(id: "h1", in: tx) == first)
            #expect(try store.handOff(ofAttachment: "b", in: tx) == second)
            #expect(try store.remove(id: "h1", in: tx))
            #expect(try !store.remove(id: "h1", in: tx), "a second adoption of the same result finds nothing")
            #expect(try store.handOff(id: "h1", in: tx) == nil)
        }
        #expect(
            Self.handOff("h1", attachment: "a", at: 2).transfer(in: URL(fileURLWithPath: "/queue")).bodyFile?.path
                == "/queue/a.jpg")
        try await db.close()
    }

    @Test("an attachment has one hand-off at a time; tables of different queues do not meet")
    func oneHandOffPerAttachmentAndScope() async throws {
        let db = try LocalDatabase(path: try TemporaryDirectory().path("app.sqlite"), schema: QueueHarness.schema)
        let photos = HandOffStore(scope: "photos")
        let documents = HandOffStore(scope: "documents")
        try await db.writeTransaction { tx in
            try photos.createTable(in: tx)
            #expect(try photos.record(Self.handOff("h1", attachment: "a", at: 1), in: tx))
            #expect(try !photos.record(Self.handOff("h2", attachment: "a", at: 2), in: tx))
            #expect(try photos.handOffs(in: tx).map(\.id) == ["h1"])
            #expect(try documents.record(Self.handOff("h1", attachment: "a", at: 3), in: tx))
            #expect(try documents.handOffs(in: tx).map(\.createdAt) == [3])
            #expect(try photos.remove(id: "h1", in: tx))
            #expect(try documents.handOff(id: "h1", in: tx) != nil)
        }
        try await db.close()
    }

    @Test("the queue's reads of queued records leave out the attachments handed to a background service")
    func queuedReadsLeaveHandedOffAttachmentsOut() async throws {
        let db = try LocalDatabase(path: try TemporaryDirectory().path("app.sqlite"), schema: QueueHarness.schema)
        let handOffs = HandOffStore(scope: "attachments")
        let store = AttachmentStore(table: "attachments", handsOff: true)
        try await db.writeTransaction { tx in
            try handOffs.createTable(in: tx)
            for (index, id) in ["up-1", "up-2", "down-1", "down-2", "delete-1"].enumerated() {
                let state: AttachmentState =
                    id.hasPrefix("up") ? .queuedUpload : id.hasPrefix("down") ? .queuedDownload : .queuedDelete
                try tx.execute(
                    sql: "INSERT INTO attachments (id, filename, state, timestamp, has_synced) VALUES (?, ?, ?, ?, 0)",
                    parameters: [id, id + ".jpg", state.rawValue, Int64(index)])
            }
            #expect(try handOffs.record(Self.handOff("h1", attachment: "up-1", at: 1), in: tx))
            #expect(try handOffs.record(Self.handOff("h2", attachment: "down-2", at: 1), in: tx))
            // Another queue's hand-off of the same id changes nothing here.
            #expect(try HandOffStore(scope: "photos").record(Self.handOff("h3", attachment: "up-2", at: 1), in: tx))
        }
        let (queued, raised, plain) = try await db.readTransaction { tx in
            (
                try store.queued(limit: 10, readyAt: 100, in: tx).map(\.id),
                try store.queued(ids: ["up-1", "up-2", "down-2"], in: tx).map(\.id),
                try AttachmentStore(table: "attachments").queued(limit: 10, readyAt: 100, in: tx).map(\.id)
            )
        }
        let status = AttachmentQueue.snapshot(
            try await db.readTransaction { tx in try store.statusRows(in: tx) }, progress: nil, budget: nil)
        #expect(status.handedOff[.queuedUpload]?.count == 1)
        #expect(status.handedOff[.queuedDownload]?.count == 1)
        #expect(status.count(.queuedUpload) == 2, "handed-off attachments stay queued")
        #expect(queued == ["up-2", "delete-1", "down-1"])
        #expect(raised == ["up-2"])
        #expect(plain == ["up-1", "up-2", "delete-1", "down-1", "down-2"], "a queue that hands nothing off reads all")
    }
}
