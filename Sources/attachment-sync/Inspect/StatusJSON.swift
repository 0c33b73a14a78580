import AttachmentSync
import Foundation

/// The `status --json` document. Its keys are part of the command's interface: add keys, never rename or
/// remove one. Every state is present (with zeros), dates are ISO 8601 in UTC, sizes are bytes.
struct StatusJSON: Encodable {
    struct Totals: Encodable {
        var count: Int
        /// Valid sizes only, saturated at Int64.max.
        var bytes: Int64
        /// Records with no size: not in `bytes`.
        var unknownSizeCount: Int
        /// Records whose size is not a byte count: not in `bytes`.
        var invalidSizeCount: Int

        init(_ totals: QueueStatus.Totals?) {
            count = totals?.count ?? 0
            bytes = totals?.bytes ?? 0
            unknownSizeCount = totals?.unknownSizeCount ?? 0
            invalidSizeCount = totals?.invalidSizeCount ?? 0
        }
    }

    struct Bytes: Encodable {
        var count: Int
        var bytes: Int64
    }

    /// A record whose size is not a byte count, as the table holds it.
    struct InvalidSize: Encodable {
        var id: String
        var state: Nullable<String>
        /// `INTEGER` (negative), `REAL`, `TEXT` or `BLOB`.
        var storageClass: String
        /// The value as text: `-7`, `1.5`, `"abc"`, `<2 bytes>`.
        var size: String
    }

    struct Cache: Encodable {
        var budget: Nullable<Int64>
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
        var lastError: Nullable<String>
        /// Downloads in a row that found no remote file yet (0 for other failures).
        var awaitingUpload: Int
        /// Tries in a row that got no answer from remote storage (0 for other failures); no attempts.
        var networkFailures: Int
        /// Tries in a row that could not reach the local file (0 for other failures); no attempts.
        var localFileFailures: Int
        /// Tries in a row that found the encryption key missing (0 for other failures); no attempts.
        var keyFailures: Int
    }

    struct GivenUp: Encodable {
        var id: String
        var state: String
        var attempts: Int
        var lastError: Nullable<String>
        var isLocalOnly: Bool
    }

    struct Entry: Encodable {
        var id: String
        var filename: String
        var state: String
        var size: Nullable<Int64>
        var contentAvailable: Bool
        var isLocalOnly: Bool
    }

    var table: String
    var records: Int
    var states: [String: Totals]
    var localContentBytes: Int64
    var localOnly: Bytes
    var cache: Cache
    var waitingForRetry: [Retry]
    var givenUp: [GivenUp]
    var largest: [Entry]
    /// Up to 100 records whose size is not a byte count (the states' totals count them all).
    var invalidSizes: [InvalidSize]

    init(_ report: AttachmentTableReport) {
        let status = report.status
        table = report.table
        records = report.recordCount
        states = Dictionary(
            uniqueKeysWithValues: AttachmentState.allCases.map { state in
                (state.description, Totals(status.states[state]))
            })
        localContentBytes = status.localContentBytes
        localOnly = Bytes(count: status.localOnly.count, bytes: status.localOnly.bytes)
        let cache = status.cache
        self.cache = Cache(
            budget: Nullable(cache.budget), usedBytes: cache.usedBytes, evictableBytes: cache.evictableBytes,
            pinnedBytes: cache.pinnedBytes, notUploadedBytes: cache.notUploadedBytes, keptBytes: cache.keptBytes,
            cannotMeetBudget: cache.cannotMeetBudget)
        waitingForRetry = status.waitingForRetry.map {
            Retry(
                id: $0.attachmentId, state: $0.state.description, attempts: $0.attempts,
                nextAttemptAt: $0.nextAttemptAt, lastError: Nullable($0.lastError), awaitingUpload: $0.awaitingUpload,
                networkFailures: $0.networkFailures, localFileFailures: $0.localFileFailures,
                keyFailures: $0.keyFailures)
        }
        givenUp = status.givenUp.map {
            GivenUp(
                id: $0.attachmentId, state: $0.state.description, attempts: $0.attempts,
                lastError: Nullable($0.lastError),
                isLocalOnly: $0.isLocalOnly)
        }
        largest = report.largest.map {
            Entry(
                id: $0.id, filename: $0.filename, state: $0.state.description, size: Nullable($0.size),
                contentAvailable: $0.contentAvailable, isLocalOnly: $0.isLocalOnly)
        }
        invalidSizes = report.invalidSizes.map {
            InvalidSize(
                id: $0.id, state: Nullable($0.state?.description), storageClass: $0.size.storageClass,
                size: StatusTable.oneLine($0.size.description, limit: 200))
        }
    }

    /// The document, pretty-printed with sorted keys.
    func encoded() throws -> String {
        try jsonDocument(self)
    }
}

/// An optional value that a JSON document always has a key for: `null` when absent (synthesized `Encodable`
/// would leave the key out), so scripts can rely on every key being there.
struct Nullable<Value: Encodable>: Encodable {
    var value: Value?

    init(_ value: Value?) {
        self.value = value
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if let value { try container.encode(value) } else { try container.encodeNil() }
    }
}

/// `value` as the CLI prints JSON: pretty-printed, keys sorted, dates in ISO 8601.
func jsonDocument(_ value: some Encodable) throws -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    encoder.dateEncodingStrategy = .iso8601
    return String(decoding: try encoder.encode(value), as: UTF8.self)
}
