import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// One id, one file; one file, one id: whatever the ids, on any volume, no two attachments share a local
/// file or a remote key, and an id that would make them share one is refused with a typed error naming it.
@Suite("Names: one id, one file", .cleansUp)
struct NamingTests {
    @Test("safe names are injective, even after case folding and Unicode normalisation")
    func safeNamesAreInjective() {
        var random = SplitMix64(seed: 42)
        let alphabet: [Character] = [
            "a", "A", "z", "Z", "0", ".", "-", "_", "^", "%", "~", " ", "é", "e\u{301}", "ß", "ﬁ", "İ", "😀", "/",
        ]
        var seen: [String: String] = [:]
        for _ in 0..<20_000 {
            let text = String(
                (0..<Int(random.next(below: 8)) + 1).map { _ in
                    alphabet[Int(random.next(below: UInt64(alphabet.count)))]
                })
            for keepingDots in [false, true] {
                let name = FileName.safeName(text, keepingDots: keepingDots)
                #expect(name.utf8.allSatisfy { $0 < 0x80 }, "ASCII")
                #expect(name == name.lowercased(), "nothing for case folding to merge")
                #expect(keepingDots || !name.contains("."), "the stem has no dot")
                let key = "\(keepingDots)\u{0}\(SimulatedDisk.folded(name))"
                if let other = seen[key] {
                    #expect(
                        other.unicodeScalars.elementsEqual(text.unicodeScalars), "\(other) and \(text) share \(name)")
                }
                seen[key] = text
            }
        }
        #expect(
            FileName.safeName("3f2a9c1e-0000-4000-8000-000000000001", keepingDots: false)
                == "3f2a9c1e-0000-4000-8000-000000000001")
        let long = String(repeating: "é", count: 150)
        #expect(FileName.safeName(long, keepingDots: false).utf8.count <= 150)
        #expect(FileName.safeName(long, keepingDots: false) != FileName.safeName(long + "x", keepingDots: false))
    }

    @Test("ids that differ only in case have their own files on a case-insensitive volume")
    func caseVariantsOnAPFS() async throws {
        try await CrashHarness(insensitive: true) { $0.archivedCacheLimit = 0 }.use { device in
            let contents = ["photo": Data("lower".utf8), "Photo": Data("title".utf8), "PHOTO": Data("upper".utf8)]
            for (id, data) in contents {
                _ = try await device.queue.saveFile(data: data, mediaType: nil, fileExtension: "jpg", id: id)
            }
            for (id, data) in contents {
                let record = try #require(try await device.record(id))
                #expect(record.localPath.flatMap(device.localBytes) == data, "\(id) has its own bytes")
                #expect(record.filename == "\(id).jpg", "the remote key keeps the seed's <id>.<ext>")
            }
            #expect(try device.filesInAttachments().count == 3)

            // Deleting, purging or evicting one never touches another's bytes.
            try await device.queue.syncNow()
            try await device.queue.deleteFile(attachmentId: "Photo")
            _ = try await device.queue.purge(attachmentId: "PHOTO")
            try await device.queue.syncNow()
            let lower = try #require(try await device.record("photo"))
            #expect(lower.localPath.flatMap(device.localBytes) == Data("lower".utf8))
            await device.queue.reconcile([])  // archived, then evicted (the limit is 0)
            try await device.queue.expireCache()
            #expect(await device.store.objects[RemoteStore.key("photo.jpg")]?.data == Data("lower".utf8))
            #expect(await device.store.objects[RemoteStore.key("PHOTO.jpg")]?.data == Data("upper".utf8))
            #expect(await device.store.objects[RemoteStore.key("Photo.jpg")] == nil)
        }
    }

    @Test("an id in another Unicode form than NFC is refused, naming it")
    func nonNFCIdsAreRefused() async throws {
        let device = try QueueHarness(
            customWatch: CustomWatch { db in
                {
                    try db.watch(sql: "SELECT photo_id FROM checklists WHERE photo_id IS NOT NULL") { cursor in
                        try WatchedAttachmentItem(id: cursor.getString(name: "photo_id"), fileExtension: "jpg")
                    }
                }
            })
        let decomposed = "cafe\u{301}"
        let error = await #expect(throws: AttachmentError.self) {
            try await device.queue.saveFile(data: Data([1]), mediaType: nil, fileExtension: "jpg", id: decomposed)
        }
        #expect(error?.code == .invalidName)
        #expect(error?.attachmentId.map { $0.unicodeScalars.elementsEqual(decomposed.unicodeScalars) } == true)
        #expect(error?.message.contains("NFC") == true)
        #expect(try device.filesOnDisk().isEmpty)

        let composed = try await device.queue.saveFile(
            data: Data([2]), mediaType: nil, fileExtension: "jpg", id: "caf\u{E9}")
        #expect(composed.localUri.map { FileManager.default.contents(atPath: $0) } == Data([2]))

        // A row with the decomposed form gets no record of its own, and the composed one is kept.
        let remote = try device.memoryRemote
        await remote.setFile(Data([3]), named: "other.jpg")
        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: decomposed)
        try await device.addChecklist("c2", photo: "other")
        try await device.waitForState("other", .synced)
        let ids = try await device.db.getAll(sql: "SELECT id FROM attachments ORDER BY id") {
            try $0.getString(name: "id")
        }
        #expect(ids.count == 2)
        #expect(!ids.contains { $0.unicodeScalars.elementsEqual(decomposed.unicodeScalars) })
    }

    @Test("an id with a dot cannot name its file <id>.<ext>: refused unless the item gives a filename")
    func dottedIds() async throws {
        let device = try QueueHarness(
            customWatch: CustomWatch { db in
                {
                    try db.watch(sql: "SELECT id, photo_id, description FROM checklists") { cursor in
                        let filename = try cursor.getStringOptional(name: "description")
                        return try WatchedAttachmentItem(
                            id: cursor.getString(name: "photo_id"), fileExtension: filename == nil ? "c" : nil,
                            filename: filename)
                    }
                }
            })
        // "a.b" with extension "c" and "a" with extension "b.c" would both be "a.b.c".
        let error = await #expect(throws: AttachmentError.self) {
            try await device.queue.saveFile(data: Data([1]), mediaType: nil, fileExtension: "c", id: "a.b")
        }
        #expect(error?.code == .invalidName)
        #expect(error?.attachmentId == "a.b")
        let plain = try await device.queue.saveFile(data: Data([2]), mediaType: nil, fileExtension: "b.c", id: "a")
        #expect(plain.filename == "a.b.c")

        let remote = try device.memoryRemote
        await remote.setFile(Data([3]), named: "given.bin")
        try await device.queue.startSync()
        try await device.db.execute(sql: "INSERT INTO checklists (id, photo_id) VALUES ('r1', 'x.y')")
        try await device.db.execute(
            sql: "INSERT INTO checklists (id, photo_id, description) VALUES ('r2', 'v.w', 'given.bin')")
        try await device.waitForState("v.w", .synced)
        #expect(try await device.state(of: "x.y") == nil, "no filename given: refused")
    }

    @Test("two attachments never share a remote file: the second id naming it is refused")
    func sharedFilenamesAreRefused() async throws {
        let device = try QueueHarness(
            customWatch: CustomWatch { db in
                {
                    try db.watch(sql: "SELECT photo_id, description FROM checklists ORDER BY id") { cursor in
                        try WatchedAttachmentItem(
                            id: cursor.getString(name: "photo_id"), filename: cursor.getString(name: "description"))
                    }
                }
            })
        let remote = try device.memoryRemote
        await remote.setFile(Data([1]), named: "shared.jpg")
        try await device.queue.startSync()
        try await device.db.execute(
            sql:
                "INSERT INTO checklists (id, photo_id, description) VALUES ('1', 'a', 'shared.jpg'), ('2', 'b', 'shared.jpg'), ('3', 'c', 'n.jpg')"
        )
        await remote.setFile(Data([2]), named: "n.jpg")
        try await device.waitForState("c", .synced)
        try await device.queue.syncNow()
        #expect(try await device.state(of: "a") == .synced)
        #expect(try await device.state(of: "b") == nil, "its file would be a's")

        // saveFile's `<id>.<ext>` is checked against the names watched items gave too.
        try await device.db.execute(
            sql: "INSERT INTO checklists (id, photo_id, description) VALUES ('4', 'z', 'q.jpg')")
        await remote.setFile(Data([3]), named: "q.jpg")
        try await device.waitForState("z", .synced)
        let error = await #expect(throws: AttachmentError.self) {
            try await device.queue.saveFile(data: Data([4]), mediaType: nil, fileExtension: "jpg", id: "q")
        }
        #expect(error?.code == .alreadyExists)
        #expect(error?.name == "q.jpg")
        #expect(await remote.file(named: "q.jpg") == Data([3]))
    }
}
