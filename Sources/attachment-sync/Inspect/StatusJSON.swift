import AttachmentSync
import Foundation

/// The `status --json` document. Its keys are part of the command's interface: add keys, never rename or
/// remove one. Every state is present (with zeros), dates are ISO 8601 in UTC, sizes are bytes.
struct StatusJSON: Encodable {
    struct Totals: Encodable {
        var count: Int
        var bytes: Int64
    }

    struct Cache: Encodable {
        var budget: Int64?
        var usedBytes: Int64
        var evictableBytes: Int64
        var pinnedBytes: Int64
        var notUploadedBytes: Int64
        var keptBytes: Int64
        var cannotMeetBudget: Bool
    }

    struct Retry: Encodable {
        var id: String
        var state: String
        var attempts: Int
        var nextAttemptAt: Date
        var lastError: String?
    }

    struct GivenUp: Encodable {
        var id: String
        var state: String
        var attempts: Int
        var lastError: String?
        var isLocalOnly: Bool
    }

    struct Entry: Encodable {
        var id: String
        var filename: String
        var state: String
        var size: Int64?
        var contentAvailable: Bool
        var isLocalOnly: Bool
    }

    var table: String
    var records: Int
    var states: [String: Totals]
    var localContentBytes: Int64
    var localOnly: Totals
    var cache: Cache
    var waitingForRetry: [Retry]
    var givenUp: [GivenUp]
    var largest: [Entry]

    init(_ report: AttachmentTableReport) {
        let status = report.status
        table = report.table
        records = report.recordCount
        states = Dictionary(
            uniqueKeysWithValues: AttachmentState.allCases.map { state in
                let totals = status.states[state]
                return (state.description, Totals(count: totals?.count ?? 0, bytes: totals?.bytes ?? 0))
            })
        localContentBytes = status.localContentBytes
        localOnly = Totals(count: status.localOnly.count, bytes: status.localOnly.bytes)
        let cache = status.cache
        self.cache = Cache(
            budget: cache.budget, usedBytes: cache.usedBytes, evictableBytes: cache.evictableBytes,
            pinnedBytes: cache.pinnedBytes, notUploadedBytes: cache.notUploadedBytes, keptBytes: cache.keptBytes,
            cannotMeetBudget: cache.cannotMeetBudget)
        waitingForRetry = status.waitingForRetry.map {
            Retry(
                id: $0.attachmentId, state: $0.state.description, attempts: $0.attempts,
                nextAttemptAt: $0.nextAttemptAt, lastError: $0.lastError)
        }
        givenUp = status.givenUp.map {
            GivenUp(
                id: $0.attachmentId, state: $0.state.description, attempts: $0.attempts, lastError: $0.lastError,
                isLocalOnly: $0.isLocalOnly)
        }
        largest = report.largest.map {
            Entry(
                id: $0.id, filename: $0.filename, state: $0.state.description, size: $0.size,
                contentAvailable: $0.contentAvailable, isLocalOnly: $0.isLocalOnly)
        }
    }

    /// The document, pretty-printed with sorted keys.
    func encoded() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return String(decoding: try encoder.encode(self), as: UTF8.self)
    }

    private enum CodingKeys: String, CodingKey {
        case table, records, states, localContentBytes, localOnly, cache, waitingForRetry, givenUp, largest
    }
}

extension StatusJSON.Cache {
    private enum CodingKeys: String, CodingKey {
        case budget, usedBytes, evictableBytes, pinnedBytes, notUploadedBytes, keptBytes, cannotMeetBudget
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(budget, forKey: .budget)  // null when none, never left out
        try container.encode(usedBytes, forKey: .usedBytes)
        try container.encode(evictableBytes, forKey: .evictableBytes)
        try container.encode(pinnedBytes, forKey: .pinnedBytes)
        try container.encode(notUploadedBytes, forKey: .notUploadedBytes)
        try container.encode(keptBytes, forKey: .keptBytes)
        try container.encode(cannotMeetBudget, forKey: .cannotMeetBudget)
    }
}

// Optional values are written as null rather than left out, so every key is always there.

extension StatusJSON.Retry {
    private enum CodingKeys: String, CodingKey { case id, state, attempts, nextAttemptAt, lastError }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(state, forKey: .state)
        try container.encode(attempts, forKey: .attempts)
        try container.encode(nextAttemptAt, forKey: .nextAttemptAt)
        try container.encode(lastError, forKey: .lastError)
    }
}

extension StatusJSON.GivenUp {
    private enum CodingKeys: String, CodingKey { case id, state, attempts, lastError, isLocalOnly }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(state, forKey: .state)
        try container.encode(attempts, forKey: .attempts)
        try container.encode(lastError, forKey: .lastError)
        try container.encode(isLocalOnly, forKey: .isLocalOnly)
    }
}

extension StatusJSON.Entry {
    private enum CodingKeys: String, CodingKey { case id, filename, state, size, contentAvailable, isLocalOnly }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(filename, forKey: .filename)
        try container.encode(state, forKey: .state)
        try container.encode(size, forKey: .size)
        try container.encode(contentAvailable, forKey: .contentAvailable)
        try container.encode(isLocalOnly, forKey: .isLocalOnly)
    }
}
