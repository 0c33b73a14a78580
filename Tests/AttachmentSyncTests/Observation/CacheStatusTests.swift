import AttachmentSync
import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@Suite("Cache budget in status", .cleansUp)
struct CacheStatusTests {
    @Test("status says when the cache budget cannot be met, and why; the file is kept")
    func budgetThatCannotBeMet() async throws {
        let device = try QueueHarness { $0.maxCacheBytes = 50 }
        let saved = try await device.queue.saveFile(
            data: testBytes(100), mediaType: "application/octet-stream", fileExtension: "bin")
        let waiting = try #require(await device.queue.status.first { $0.cache.notUploadedBytes == 100 })
        #expect(waiting.cache.usedBytes == 100)
        #expect(waiting.cache.cannotMeetBudget == true, "the only copy is never evicted")

        try await device.queue.syncNow()
        let uploaded = try #require(await device.queue.status.first { $0.cache.keptBytes == 100 })
        #expect(uploaded.cache.cannotMeetBudget == true, "a saved file stays as eagerly kept content")
        try await device.queue.pin(attachmentId: saved.id)
        let pinned = try #require(await device.queue.status.first { $0.cache.pinnedBytes == 100 })
        #expect(pinned.cache.evictableBytes == 0)
        #expect(pinned.cache.cannotMeetBudget == true)
        try await device.queue.syncNow()
        #expect(FileManager.default.fileExists(atPath: try #require(saved.localUri)))
    }

    @Test("without a budget the cache section only counts; a budget that the content fits is met")
    func budgetThatCanBeMet() async throws {
        let device = try QueueHarness()
        _ = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "bin")
        let unbudgeted = try #require(await device.queue.status.first { $0.cache.usedBytes == 10 })
        #expect(unbudgeted.cache.budget == nil)
        #expect(unbudgeted.cache.notUploadedBytes == 10)
        #expect(!unbudgeted.cache.cannotMeetBudget, "no budget, nothing to miss")

        let budgeted = try QueueHarness { $0.maxCacheBytes = 1_000 }
        _ = try await budgeted.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "bin")
        let status = try #require(await budgeted.queue.status.first { $0.cache.usedBytes == 10 })
        #expect(status.cache.cannotMeetBudget == false)
        #expect(status.cache.budget == 1_000)
    }
}
