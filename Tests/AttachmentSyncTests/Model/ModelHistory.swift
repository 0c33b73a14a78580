import Foundation
import TestSupport

@testable import AttachmentSync

/// How one simulated device is set up for a history.
struct ModelSetup: Sendable, CustomStringConvertible {
    var insensitiveDisk = false
    var maxAttempts: Int?
    var archivedCacheLimit: Int64 = 100
    var maxCacheBytes: Int64?
    var onDemand = false
    var concurrency = 1
    /// Files above this size wait for an unmetered network (`networkPolicy`), or `nil` for none.
    var unmeteredAbove: Int64?
    /// Startup checks synced and archived records and removes leftovers in the background, while sync
    /// (when on) already runs (`startupFileCheck = .inBackground`).
    var backgroundStartupCheck = false
    /// Uploads and downloads go to the model's background transfer service (`backgroundTransfers`).
    var background = false
    /// End-to-end encryption is on: the queue's remote is an ``EncryptedRemoteStorage`` over the model's,
    /// other devices upload encrypted files, and keys are rotated, lost and restored (see ``ModelKeys``).
    var encrypted = false

    var description: String {
        "setup(insensitiveDisk: \(insensitiveDisk), maxAttempts: \(maxAttempts.map(String.init) ?? "nil"), "
            + "archivedCacheLimit: \(archivedCacheLimit), maxCacheBytes: \(maxCacheBytes.map(String.init) ?? "nil"), "
            + "onDemand: \(onDemand), concurrency: \(concurrency), "
            + "unmeteredAbove: \(unmeteredAbove.map(String.init) ?? "nil"), "
            + "backgroundStartupCheck: \(backgroundStartupCheck), background: \(background), encrypted: \(encrypted))"
    }
}

/// One thing that happens to the device: the app calls the queue, rows change, the remote misbehaves, the
/// clock moves, the process dies.
enum ModelStep: Sendable, Hashable, CustomStringConvertible {
    /// `saveFile(data:)` of `size` bytes (content number `content`); the hook points a row at it when `watch`.
    case save(id: String, content: Int, size: Int, ext: String?, watch: Bool)
    /// `saveFile(fileURL:)` of a file the app wrote (through a symbolic link when `symlink`).
    case saveFile(id: String, content: Int, size: Int, move: Bool, symlink: Bool, watch: Bool)
    case delete(id: String)
    /// A row starts or stops referring to an attachment; nothing is reconciled until `.emit`.
    case watch(id: String)
    case unwatch(id: String)
    /// The app's watch emits its rows: the queue reconciles them.
    case emit
    /// Another device uploads an attachment (`metadata`: the remote keeps its SHA-256; `rowHash`: the row
    /// carries it; `rowSize`: the row carries the size) and a row refers to it.
    case seed(id: String, content: Int, size: Int, metadata: Bool, rowHash: Bool, rowSize: Bool)
    case syncNow
    case download(id: String)
    case purge(id: String)
    case pin(id: String)
    case expireCache
    case startSync
    case stopSync
    case advance(seconds: Int)
    case fault(RemoteFault, count: Int)
    /// The process dies at its `operations`-th durable operation during the next step (or later).
    case crash(operations: Int)
    /// A clean restart: the queue is closed and opened again.
    case restart
    case retryAll
    /// The network becomes offline (0), metered (1) or unmetered (2).
    case network(Int)
    /// `raisePriority(attachmentId:)`.
    case raise(id: String)
    /// The attachments folder's entries are out of reach (`EACCES` from every file operation in it) during
    /// this step and the next `steps - 1`, then in reach again.
    case unreachable(steps: Int)
    /// The background service runs the oldest `count` transfers it was handed (whether the app's process is
    /// alive or not).
    case serviceRuns(count: Int)
    /// The background service loses the oldest transfer it was handed: it never runs or reports it.
    case serviceLoses
    /// The background service reports the last result acknowledged again.
    case serviceRepeats
    /// A new key becomes the current one, then the app's ``KeyRotation`` re-encrypts every stored file of
    /// the device's records under it, while the queue's transfers run: those of sync (when it is on), and
    /// with `duringSync` those of a `syncNow()` the app calls meanwhile.
    case rotateKey(duringSync: Bool)
    /// The device loses a key (the keychain was reset, the key was revoked): the `pick`-th (modulo) of those
    /// it has, the current one included. With `restart`, the app restarts without it.
    case loseKey(pick: Int, restart: Bool)
    /// A lost key comes back (the `pick`-th, modulo, of those lost), and the app calls `keysDidChange()`.
    case restoreKey(pick: Int)

    var description: String {
        switch self {
        case .save(let id, let content, let size, let ext, let watch):
            "save(id: \(id.debugDescription), content: \(content), size: \(size), ext: \(ext.debugDescription), watch: \(watch))"
        case .saveFile(let id, let content, let size, let move, let symlink, let watch):
            "saveFile(id: \(id.debugDescription), content: \(content), size: \(size), move: \(move), symlink: \(symlink), watch: \(watch))"
        case .delete(let id): "delete(id: \(id.debugDescription))"
        case .watch(let id): "watch(id: \(id.debugDescription))"
        case .unwatch(let id): "unwatch(id: \(id.debugDescription))"
        case .emit: "emit"
        case .seed(let id, let content, let size, let metadata, let rowHash, let rowSize):
            "seed(id: \(id.debugDescription), content: \(content), size: \(size), metadata: \(metadata), rowHash: \(rowHash), rowSize: \(rowSize))"
        case .syncNow: "syncNow"
        case .download(let id): "download(id: \(id.debugDescription))"
        case .purge(let id): "purge(id: \(id.debugDescription))"
        case .pin(let id): "pin(id: \(id.debugDescription))"
        case .expireCache: "expireCache"
        case .startSync: "startSync"
        case .stopSync: "stopSync"
        case .advance(let seconds): "advance(seconds: \(seconds))"
        case .fault(let fault, let count): "fault(.\(fault), count: \(count))"
        case .crash(let operations): "crash(operations: \(operations))"
        case .restart: "restart"
        case .retryAll: "retryAll"
        case .network(let kind): "network(\(["offline", "metered", "unmetered"][kind]))"
        case .raise(let id): "raise(id: \(id.debugDescription))"
        case .unreachable(let steps): "unreachable(steps: \(steps))"
        case .serviceRuns(let count): "serviceRuns(count: \(count))"
        case .serviceLoses: "serviceLoses"
        case .serviceRepeats: "serviceRepeats"
        case .rotateKey(let duringSync): "rotateKey(duringSync: \(duringSync))"
        case .loseKey(let pick, let restart): "loseKey(pick: \(pick), restart: \(restart))"
        case .restoreKey(let pick): "restoreKey(pick: \(pick))"
        }
    }
}

/// A history: a setup and its steps, made from a seed.
struct ModelHistory: Sendable, CustomStringConvertible {
    var seed: UInt64
    var setup: ModelSetup
    var steps: [ModelStep]

    var description: String {
        "history \(seed): \(setup)\n"
            + steps.enumerated().map { "  \($0.offset): \($0.element)" }.joined(separator: "\n")
    }

    /// Ids the app saves: lowercase UUID-like ones (the common case) and ones that only differ in case or
    /// Unicode form (two ids, one file on APFS unless names are made safe), a dotted one (ambiguous names).
    static let savedIds = [
        "3f2a9c1e-0000-4000-8000-000000000001", "3f2a9c1e-0000-4000-8000-000000000002", "photo", "Photo", "PHOTO",
        "caf\u{E9}", "cafe\u{301}", "a-b_c", "x.y", "n1",
    ]
    /// Ids other devices upload.
    static let seededIds = ["r1", "R1", "r\u{E9}sum\u{E9}", "re\u{301}sume\u{301}", "r2"]
    static let sizes = [0, 1, 100, 5000, 70_000]

    /// A random history of `length` steps.
    static func random(seed: UInt64, length: Int) -> ModelHistory {
        var random = SplitMix64(seed: seed)
        func pick<T>(_ values: [T]) -> T { values[Int(random.next(below: UInt64(values.count)))] }
        func chance(_ percent: UInt64) -> Bool { random.next(below: 100) < percent }

        var setup = ModelSetup()
        setup.insensitiveDisk = chance(50)
        setup.maxAttempts = pick([nil, nil, 1, 2, 3])
        setup.archivedCacheLimit = pick([0, 1, 3, 100])
        setup.maxCacheBytes = pick([nil, nil, 6000, 100_000])
        setup.onDemand = chance(25)
        setup.unmeteredAbove = pick([nil, nil, 1000])
        setup.concurrency = pick([1, 1, 2, 3])
        setup.backgroundStartupCheck = chance(50)
        setup.background = chance(35)
        // Drawn from a generator of its own, so that the histories of the other setups stay what they were.
        var encryption = SplitMix64(seed: seed ^ 0x656E_6372_7970_7465)
        setup.encrypted = encryption.next(below: 100) < 30

        var content = 0
        var steps: [ModelStep] = []
        while steps.count < length {
            content += 1
            let anyId = pick(savedIds + seededIds)
            // Steps 110..<124 are the encrypted setups' key steps; the background service's follow them.
            let kinds: UInt64 = setup.background ? (setup.encrypted ? 136 : 122) : setup.encrypted ? 124 : 110
            switch random.next(below: kinds) {
            case 0..<16:
                steps.append(
                    .save(
                        id: pick(savedIds), content: content, size: pick(sizes),
                        ext: pick(["jpg", "JPG", nil, "tar.gz"]),
                        watch: chance(70)))
            case 16..<26:
                steps.append(
                    .saveFile(
                        id: pick(savedIds), content: content, size: pick(sizes), move: chance(70), symlink: chance(20),
                        watch: chance(70)))
            case 26..<32: steps.append(.delete(id: pick(savedIds)))
            case 32..<38: steps.append(.watch(id: anyId))
            case 38..<44: steps.append(.unwatch(id: anyId))
            case 44..<52: steps.append(.emit)
            case 52..<58:
                let metadata = chance(60)
                steps.append(
                    .seed(
                        id: pick(seededIds), content: content, size: pick(sizes), metadata: metadata,
                        // Sometimes no hash anywhere: then only the size can protect (and is checked).
                        rowHash: metadata ? chance(30) : chance(60), rowSize: chance(50)))
            case 58..<68: steps.append(.syncNow)
            case 68..<71: steps.append(.download(id: anyId))
            case 71..<74: steps.append(.purge(id: anyId))
            case 74..<75: steps.append(.pin(id: anyId))
            case 75..<77: steps.append(.expireCache)
            case 77..<79: steps.append(.startSync)
            case 79..<80: steps.append(.stopSync)
            case 80..<83: steps.append(.advance(seconds: pick([1, 5, 60, 600])))
            case 83..<89:
                let fault = pick([
                    RemoteFault.unavailable, .notFound, .truncate, .corrupt, .retryAfter(seconds: 7),
                    .retryAfter(seconds: Int64.max), .retryAfter(seconds: 9_999_999_999),
                ])
                steps.append(.fault(fault, count: pick([1, 2, 5])))
            case 89..<96: steps.append(.crash(operations: Int(random.next(below: 12)) + 1))
            case 96..<98: steps.append(.restart)
            case 98..<100: steps.append(.retryAll)
            case 100..<103: steps.append(.network(Int(random.next(below: 3))))
            case 103..<106: steps.append(.raise(id: anyId))
            case 106..<110: steps.append(.unreachable(steps: pick([1, 2, 4])))
            case 110..<116 where setup.encrypted: steps.append(.rotateKey(duringSync: chance(50)))
            case 116..<120 where setup.encrypted:
                steps.append(.loseKey(pick: Int(random.next(below: 4)), restart: chance(30)))
            case 120..<124 where setup.encrypted: steps.append(.restoreKey(pick: Int(random.next(below: 4))))
            case 110..<118, 124..<132: steps.append(.serviceRuns(count: pick([1, 2, 5, 20])))
            case 118..<120, 132..<134: steps.append(.serviceLoses)
            default: steps.append(.serviceRepeats)
            }
        }
        return ModelHistory(seed: seed, setup: setup, steps: steps)
    }

    /// The content number `content` as `size` bytes.
    static func bytes(content: Int, size: Int) -> Data {
        var generator = SplitMix64(seed: UInt64(content) &* 7919 &+ UInt64(size))
        return Data((0..<size).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
    }
}
