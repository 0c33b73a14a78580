import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// No number from outside (a server's `Retry-After`, a configured interval, an injected date) can trap the
/// process or park an attachment for years.
@Suite("Absurd numbers", .cleansUp)
struct ClampingTests {
    /// When the attachment's next attempt is, in seconds from the harness's clock date.
    func secondsUntilRetry(_ device: QueueHarness, _ id: String) async throws -> Double {
        let next = try await device.db.get(
            sql: "SELECT next_attempt_at FROM attachments WHERE id = ?", parameters: [id]
        ) {
            try $0.getInt64(name: "next_attempt_at")
        }
        return Double(next) / 1000 - device.clock.date.timeIntervalSince1970
    }

    @Test(
        "a server's Retry-After is honoured up to the backoff ceiling; an absurd one waits the ceiling",
        arguments: [
            (Duration.seconds(120), 120.0), (.seconds(600), 300), (.seconds(Int64.max), 300),
            (.seconds(9_999_999_999), 300),
        ])
    func retryAfterIsClamped(retryAfter: Duration, expected: Double) async throws {
        let device = try QueueHarness {
            $0.retryBackoff = RetryBackoff(initialDelay: .seconds(1), maximumDelay: .seconds(300), jitter: false)
        }
        let remote = try device.memoryRemote
        await remote.failNext(
            .upload,
            with: AttachmentError(code: .remoteUnavailable, message: "slow down", retryAfter: retryAfter))
        let photo = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        try await device.queue.syncNow()
        let wait = try await secondsUntilRetry(device, photo.id)
        #expect(abs(wait - expected) < 1, "waits \(wait) s")
        let status = try #require(await device.queue.status.first { _ in true })
        #expect(status.waitingForRetry.map(\.attachmentId) == [photo.id])
    }

    @Test("durations, intervals and dates of any size convert without trapping")
    func conversionsSaturate() async throws {
        #expect(Duration.seconds(Int64.max).clampedMilliseconds == .max)
        #expect(Duration.seconds(Int64.min).clampedMilliseconds == .min)
        #expect(Duration.milliseconds(1500).clampedMilliseconds == 1500)
        #expect(Int64.max.addingClamped(1) == .max)
        #expect(Int64.min.subtractingClamped(1) == .min)
        #expect(Int64(clamping: 1e300) == .max && Int64(clamping: -1e300) == .min && Int64(clamping: .nan) == 0)
        #expect(clampedMilliseconds(Date(timeIntervalSince1970: 1e300)) == .max)
        #expect(Duration(seedSeconds: 1e300) > .seconds(1_000_000_000))
        #expect(Duration(seedSeconds: -.infinity) < .zero, "non-finite stays invalid, for validation to name")

        var generator = SplitMix64(seed: 26)
        for jitter in [false, true] {
            let backoff = RetryBackoff(initialDelay: .seconds(1), maximumDelay: .seconds(Int64.max), jitter: jitter)
            for attempt in [1, 2, 62, 63, 64, 1000, Int.max] {
                #expect(backoff.delay(afterAttempt: attempt, using: &generator) >= .zero)
            }
            #expect(
                backoff.delay(afterAttempt: 5, retryAfter: .seconds(Int64.max), using: &generator)
                    <= .seconds(Int64.max))
        }
    }

    @Test("a queue with absurd intervals and a clock at the end of time still saves and retries")
    func absurdConfiguration() async throws {
        let folder = try TemporaryDirectory()
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: QueueHarness.schema)
        let remote = InMemoryRemoteStorage()
        await remote.failNext(
            .upload, with: AttachmentError(code: .remoteUnavailable, message: "x", retryAfter: .seconds(Int64.max)))
        let queue = AttachmentQueue(
            db: db, attachmentsDirectory: folder.path("files"), remoteStorage: remote, syncInterval: 1e300,
            syncThrottleDuration: 1e300)
        TestCleanup.add {
            await queue.close()
            try? await db.close()
        }
        let photo = try await queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        try await queue.syncNow()
        #expect(try await queue.attachment(id: photo.id)?.state == .queuedUpload)

        var configuration = AttachmentQueue.Configuration(attachmentsDirectory: folder.path("other"))
        configuration.currentDate = { Date(timeIntervalSince1970: 1e300) }
        configuration.syncInterval = .zero
        let late = AttachmentQueue(db: db, remoteStorage: remote, configuration: configuration)
        TestCleanup.add { await late.close() }
        await remote.failNext(.upload, with: InjectedFailure("down"))
        _ = try await late.saveFile(data: testBytes(5), mediaType: nil, fileExtension: "jpg")
        try await late.syncNow()
    }
}
