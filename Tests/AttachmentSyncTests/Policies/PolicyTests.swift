import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// The queue's pure deciders besides the state machine: failures, the cache budget, startup verification.
@Suite("Failure, cache and startup policies (pure)")
struct PolicyTests {
    /// A generator that always draws the same value, for jitter.
    struct Fixed: RandomNumberGenerator {
        var value: UInt64
        mutating func next() -> UInt64 { value }
    }

    @Test("failures: the handler decides first, then maxAttempts; retries wait the backoff or Retry-After, capped")
    func failurePolicy() {
        let policy = FailurePolicy(
            retryBackoff: RetryBackoff(initialDelay: .seconds(1), maximumDelay: .seconds(60), jitter: false),
            maxAttempts: 3)
        var generator = Fixed(value: 0)
        func decide(_ attempt: Int, handler: Bool = true, retryAfter: Duration? = nil) -> FailurePolicy.Decision {
            policy.decide(
                attempt: attempt, handlerRetries: handler, retryAfter: retryAfter, now: 10_000, using: &generator)
        }
        #expect(decide(1) == .retry(at: 11_000))
        #expect(decide(2) == .retry(at: 12_000), "doubling")
        #expect(decide(3) == .giveUpAfterMaxAttempts)
        #expect(decide(1, handler: false) == .giveUpByHandler, "the handler's verdict comes before the count")
        #expect(decide(1, retryAfter: .seconds(30)) == .retry(at: 40_000), "the server knows best when longer")
        #expect(decide(2, retryAfter: .milliseconds(10)) == .retry(at: 12_000), "never shorter than the backoff")
        #expect(decide(1, retryAfter: .seconds(86_400 * 365)) == .retry(at: 70_000), "capped at maximumDelay")
        let unlimited = FailurePolicy(retryBackoff: policy.retryBackoff, maxAttempts: nil)
        let late = unlimited.decide(attempt: 1_000, handlerRetries: true, retryAfter: nil, now: .max, using: &generator)
        #expect(late == .retry(at: .max), "no limit, and the time saturates instead of overflowing")
    }

    func record(
        _ id: String, _ state: AttachmentState, local: Bool = true, synced: Bool = true, onDemand: Bool = false,
        pinned: Bool = false, givenUp: AttachmentState? = nil, usedAt: Int64? = nil, size: Int64 = 100
    ) -> AttachmentRecord {
        var record = AttachmentRecord(
            id: id, filename: "\(id).bin", state: state, timestamp: 1, hasSynced: synced,
            localPath: local ? "\(id).bin" : nil, size: size)
        record.onDemand = onDemand
        record.pinned = pinned
        record.givenUp = givenUp
        record.lastUsedAt = usedAt
        return record
    }

    @Test("cache: archived before on-demand, least recently used first; pinned, local-only, eager, busy stay")
    func cacheOrder() {
        let records = [
            record("od-old", .synced, onDemand: true, usedAt: 1),
            record("od-new", .synced, onDemand: true, usedAt: 9),
            record("arch-new", .archived, usedAt: 8),
            record("arch-old", .archived, usedAt: 2),
            record("pinned", .archived, pinned: true, usedAt: 0),
            record("eager", .synced, usedAt: 0),
            record("local-only", .archived, synced: false, givenUp: .queuedUpload, usedAt: 0),
            record("given-up", .archived, givenUp: .queuedDownload, usedAt: 0),
            record("busy", .archived, usedAt: 0),
            record("remote-only", .synced, local: false, onDemand: true),
        ]
        let policy = CachePolicy(budget: 100)
        #expect(
            policy.evictionOrder(used: 1_000, candidates: records, busy: ["busy"]).map(\.id)
                == ["arch-old", "arch-new", "od-old", "od-new"])
        #expect(policy.evictionOrder(used: 100, candidates: records, busy: []).isEmpty, "within the budget")
        #expect(CachePolicy.classify(records[4]) == .pinned)
        #expect(CachePolicy.classify(records[5]) == .kept)
        #expect(CachePolicy.classify(records[6]) == .notUploaded)
        #expect(CachePolicy.classify(records[9]) == nil)
        #expect(policy.cannotMeet(used: 500, evictable: 300), "200 kept bytes > 100")
        #expect(!policy.cannotMeet(used: 500, evictable: 400))
    }

    @Test("cache: the SQL classification agrees with the Swift one on every combination of its columns")
    func cacheSQLAgrees() async throws {
        let folder = try TemporaryDirectory()
        let db = try LocalDatabase(
            path: folder.path("c.sqlite"), schema: Schema(tables: [createAttachmentTable(name: "attachments")]))
        defer { try? db.close() }
        try await db.writeTransaction { tx in
            var n = 0
            for state in 0...4 {
                for local in [false, true] {
                    for pinned: Int? in [nil, 0, 1] {
                        for synced: Int? in [nil, 0, 1] {
                            for onDemand: Int? in [nil, 0, 1] {
                                for givenUp: Int? in [nil, 0] {
                                    n += 1
                                    _ = try tx.execute(
                                        sql: "INSERT INTO attachments (id, filename, state, timestamp, local_uri, "
                                            + "pinned, has_synced, on_demand, given_up, size) "
                                            + "VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, 10)",
                                        parameters: [
                                            "r\(n)", "r\(n).bin", state, local ? "r\(n).bin" : nil, pinned, synced,
                                            onDemand, givenUp,
                                        ])
                                }
                            }
                        }
                    }
                }
            }
        }
        let store = AttachmentStore(table: "attachments")
        let (records, classes) = try await db.readTransaction { tx in
            (
                try store.records(in: tx),
                try tx.getAll(sql: "SELECT id, \(AttachmentStore.cacheClassSQL) AS class FROM attachments") {
                    (try $0.getString(name: "id"), try $0.getStringOptional(name: "class"))
                }
            )
        }
        let sqlClass = Dictionary(uniqueKeysWithValues: classes)
        #expect(records.count == 540)
        for record in records {
            #expect(CachePolicy.classify(record)?.rawValue == sqlClass[record.id] ?? nil, "\(record)")
        }
        let evictable = try await db.readTransaction { tx in
            try store.evictable(in: tx).map(\.id)
        }
        #expect(Set(evictable) == Set(records.filter { CachePolicy.classify($0) == .evictable }.map(\.id)))
    }

    @Test("downloadAttachments is a shorthand for downloadPolicy, in both directions")
    func downloadAttachmentsShorthand() throws {
        var configuration = AttachmentQueue.Configuration(attachmentsDirectory: "/tmp/x")
        let item = try WatchedAttachmentItem(id: "a", fileExtension: "jpg")
        #expect(configuration.downloadAttachments)
        configuration.downloadAttachments = false
        #expect(configuration.downloadPolicy.mode(for: item) == .onDemand)
        #expect(!configuration.downloadAttachments)
        configuration.downloadAttachments = true
        #expect(configuration.downloadPolicy.mode(for: item) == .eager)
        configuration.downloadPolicy = .custom { $0.id == "a" ? .onDemand : .eager }
        #expect(configuration.downloadAttachments, "a custom policy downloads some")
        configuration.downloadAttachments = true
        #expect(configuration.downloadPolicy.mode(for: item) == .onDemand, "true leaves a custom policy alone")
        configuration.downloadAttachments = false
        #expect(
            configuration.downloadPolicy.mode(for: try WatchedAttachmentItem(id: "b", fileExtension: "jpg"))
                == .onDemand)
    }

    @Test("startup: the decision table of record state × file presence")
    func startupTable() {
        typealias V = StartupDecisionTable.Verdict
        let expected: [(AttachmentState, Bool, Bool, V)] = [
            (.queuedDelete, true, false, .removeFile), (.queuedDelete, false, false, .removeFile),
            (.queuedUpload, true, false, .keep), (.queuedUpload, false, true, .completeSave),
            (.queuedUpload, false, false, .giveUpUpload),
            (.synced, true, false, .keep), (.synced, false, false, .downloadAgain),
            (.archived, true, false, .keep), (.archived, false, false, .release),
            (.queuedDownload, true, false, .keep), (.queuedDownload, false, false, .release),
        ]
        for (state, file, staging, verdict) in expected {
            #expect(
                StartupDecisionTable.verdict(state: state, fileExists: file, stagingExists: staging) == verdict,
                "\(state), file \(file), staging \(staging)")
        }
        // A staging twin never resurrects anything but an upload.
        for state in [AttachmentState.synced, .archived, .queuedDownload] {
            #expect(StartupDecisionTable.verdict(state: state, fileExists: false, stagingExists: true) != .completeSave)
        }
    }
}
