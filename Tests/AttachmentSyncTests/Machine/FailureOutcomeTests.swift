import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// What the state machine decides a failed transfer becomes (``FailurePolicy/outcome(of:record:now:using:)``),
/// for every kind of failure a worker reports, and what the store books for it.
@Suite("Failure outcomes")
struct FailureOutcomeTests {
    static let policy = FailurePolicy(
        retryBackoff: RetryBackoff(initialDelay: .seconds(2), maximumDelay: .seconds(60), jitter: false),
        maxAttempts: 3,
        notUploadedYetBackoff: RetryBackoff(initialDelay: .seconds(60), maximumDelay: .seconds(900), jitter: false))

    static func record(_ state: AttachmentState, attempts: Int = 0) -> AttachmentRecord {
        var record = AttachmentRecord(id: "a", filename: "a.jpg", state: state, timestamp: 1, localPath: "a.jpg")
        record.attempts = attempts
        return record
    }

    static func outcome(
        _ kind: TransferFailure.Kind, _ record: AttachmentRecord, error: any Error = URLError(.badServerResponse)
    )
        -> FailureOutcome
    {
        var generator = SplitMix64(seed: 26)
        return policy.outcome(
            of: TransferFailure(error: error, kind: kind), record: record, now: 1_000, using: &generator)
    }

    @Test("each kind of failure becomes its outcome")
    func outcomes() {
        let upload = Self.record(.queuedUpload)
        #expect(Self.outcome(.other(handlerRetries: true), upload) == .retry(attempt: 1, at: 1_000 + 2_000))
        #expect(
            Self.outcome(.other(handlerRetries: true), Self.record(.queuedUpload, attempts: 2))
                == .giveUp(attempts: 3, releasingLocalFile: false, afterMaxAttempts: true))
        #expect(
            Self.outcome(.other(handlerRetries: false), upload)
                == .giveUp(attempts: 1, releasingLocalFile: false, afterMaxAttempts: false))
        #expect(
            Self.outcome(.conflict, upload) == .giveUp(attempts: 1, releasingLocalFile: false, afterMaxAttempts: false))
        #expect(
            Self.outcome(.localFileGone, upload)
                == .giveUp(attempts: 1, releasingLocalFile: true, afterMaxAttempts: false))
        #expect(Self.outcome(.networkGone, upload) == .interrupted)
        #expect(Self.outcome(.noAnswer, upload) == .wait(.network, count: 1, at: 1_000 + 2_000))
        #expect(Self.outcome(.localFilesOutOfReach, upload) == .wait(.localFiles, count: 1, at: 1_000 + 2_000))
        let download = Self.record(.queuedDownload)
        #expect(
            Self.outcome(.notUploadedYet(handlerRetries: true), download) == .awaitUpload(wait: 1, at: 1_000 + 60_000))
        #expect(
            Self.outcome(.other(handlerRetries: false), Self.record(.queuedDelete))
                == .giveUp(attempts: 1, releasingLocalFile: true, afterMaxAttempts: false),
            "a given-up delete lets go of its file")
    }

    @Test("the store books each outcome on the record, only while it is in the state the transfer ran in")
    func storeBooksOutcomes() async throws {
        let folder = try TemporaryDirectory()
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: QueueHarness.schema)
        let store = AttachmentStore(table: "attachments")
        let record = Self.record(.queuedUpload)
        try await db.writeTransaction { tx in try store.insert(record, in: tx) }
        let error = AttachmentError(code: .remoteUnavailable, message: "503")

        let retried = try await db.writeTransaction { tx in
            try store.book(.retry(attempt: 1, at: 5_000), of: record, error: error, timestamp: 2, in: tx)
        }
        var now = try #require(try await db.readTransaction { tx in try store.record(id: "a", in: tx) })
        #expect(retried && now.state == .queuedUpload && now.attempts == 1 && now.nextAttemptAt == 5_000)
        #expect(now.lastError?.contains("503") == true && now.timestamp == 1, "a retry keeps the timestamp")

        let waited = try await db.writeTransaction { tx in
            try store.book(.wait(.localFiles, count: 2, at: 7_000), of: record, error: error, timestamp: 3, in: tx)
        }
        now = try #require(try await db.readTransaction { tx in try store.record(id: "a", in: tx) })
        #expect(waited && now.attempts == 1 && now.localUnavailable == 2 && now.nextAttemptAt == 7_000)

        let gaveUp = try await db.writeTransaction { tx in
            try store.book(
                .giveUp(attempts: 3, releasingLocalFile: false, afterMaxAttempts: true), of: record, error: error,
                timestamp: 4, in: tx)
        }
        now = try #require(try await db.readTransaction { tx in try store.record(id: "a", in: tx) })
        #expect(gaveUp && now.state == .archived && now.givenUp == .queuedUpload && now.attempts == 3)
        #expect(now.localPath == "a.jpg" && now.nextAttemptAt == nil, "a given-up upload keeps its file, the only copy")

        let stale = try await db.writeTransaction { tx in
            try store.book(.retry(attempt: 4, at: 9_000), of: record, error: error, timestamp: 5, in: tx)
        }
        now = try #require(try await db.readTransaction { tx in try store.record(id: "a", in: tx) })
        #expect(!stale && now.state == .archived && now.attempts == 3, "a record that moved on is left as it is")
        try await db.close()
    }
}
