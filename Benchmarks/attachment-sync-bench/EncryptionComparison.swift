import AttachmentSync
import AttachmentSyncS3
import Crypto
import Foundation

/// The two sides of P6E, P8E and P9E (issue 28): the queue's remote as it is, or wrapped in an
/// ``EncryptedRemoteStorage``.
enum Encryption: String, Sendable, Hashable, CaseIterable {
    /// The S3 adapter alone.
    case plain
    /// `EncryptedRemoteStorage(wrapping:keys:)` around the same S3 adapter.
    case encrypted

    /// The order of the sides in round `round`: plain first in even rounds, encrypted first in odd ones, so
    /// neither side always runs on a server the other has just warmed up (or filled).
    static func order(round: Int) -> [Encryption] {
        round.isMultiple(of: 2) ? [.plain, .encrypted] : [.encrypted, .plain]
    }
}

/// What one side measured in one round: the wall-clock time and the client's CPU time of the timed part.
struct TimedSample: Sendable {
    var elapsed: Duration
    var cpu: Duration
}

/// What P6E, P8E and P9E share: the key, the encrypted remote, the verdict and the report's figures.
enum EncryptionComparison {
    /// The most the encrypted side may take, as a multiple of the plain side's time in the same run.
    static let targetRatio = 1.15
    /// The id of the run's one key.
    static let keyId = "bench"
    /// What every encrypted object starts with (the format's magic).
    static let magic = Data("ASE".utf8)
    /// A MiB, in bytes.
    static let mebibyte = 1_048_576.0

    /// The key provider of the run: one fresh 256-bit key under ``keyId``.
    static func keys(_ key: SymmetricKey) -> StaticKeyProvider {
        StaticKeyProvider(keys: [keyId: key], current: keyId)
    }

    /// `base` for the plain side; `base` wrapped in an ``EncryptedRemoteStorage`` with `key` for the
    /// encrypted one.
    static func remote(_ base: any RemoteStorageAdapter, _ side: Encryption, key: SymmetricKey)
        -> any RemoteStorageAdapter
    {
        switch side {
        case .plain: base
        case .encrypted: EncryptedRemoteStorage(wrapping: base, keys: keys(key))
        }
    }

    /// CPU time per MiB of content, `12.3 ms/MiB`.
    static func cpuPerMiB(_ cpu: Duration, bytes: Int64) -> String {
        String(format: "%.1f ms/MiB", cpu.milliseconds / (Double(bytes) / mebibyte))
    }

    /// The median time and CPU of each side, the ratio of the medians (encrypted over plain) and the
    /// per-round ratios, for one direction.
    struct Comparison {
        var plain: [TimedSample]
        var encrypted: [TimedSample]

        var plainTime: Duration { median(plain.map(\.elapsed)) }
        var encryptedTime: Duration { median(encrypted.map(\.elapsed)) }
        var plainCPU: Duration { median(plain.map(\.cpu)) }
        var encryptedCPU: Duration { median(encrypted.map(\.cpu)) }
        /// Encrypted over plain, medians.
        var ratio: Double { encryptedTime.seconds / plainTime.seconds }
        /// Encrypted over plain, round by round.
        var rounds: RoundRatios { RoundRatios(encrypted.map(\.elapsed), over: plain.map(\.elapsed)) }
        /// Whether the ratio of the medians meets ``targetRatio``.
        var met: Bool { ratio <= targetRatio }

        init(_ samples: [Encryption: [TimedSample]]) {
            plain = samples[.plain] ?? []
            encrypted = samples[.encrypted] ?? []
        }

        /// `plain 3.51 s, encrypted 3.80 s`.
        var times: String {
            "plain \(formatDuration(plainTime)), encrypted \(formatDuration(encryptedTime))"
        }

        /// `client CPU plain 20.1 ms/MiB, encrypted 28.3 ms/MiB`.
        func cpu(bytes: Int64) -> String {
            "client CPU plain \(cpuPerMiB(plainCPU, bytes: bytes)), encrypted \(cpuPerMiB(encryptedCPU, bytes: bytes))"
        }

        /// `1.08× plain (rounds 1.02–1.12×)`.
        var result: String {
            "\(formatRatio(ratio)) plain\(parenthesized(rounds.spread))"
        }

        /// Each round's times, for `--verbose`.
        var roundsDetail: String {
            "plain " + plain.map { formatDuration($0.elapsed) }.joined(separator: ", ") + "; encrypted "
                + encrypted.map { formatDuration($0.elapsed) }.joined(separator: ", ")
        }
    }

    /// The report of a scenario with one direction: the medians, the CPU per MiB of content, encrypted over
    /// plain with the rounds' spread, the target and the verdict.
    static func report(
        title: String, _ samples: [Encryption: [TimedSample]], bytes: Int64, rounds: Int, details: [String]
    ) -> ScenarioReport {
        let comparison = Comparison(samples)
        return ScenarioReport(
            title: title,
            figures: comparison.times + (rounds > 1 ? " (medians of \(rounds))" : "") + "; "
                + comparison.cpu(bytes: bytes),
            result: "encrypted \(formatRatio(comparison.ratio)) plain",
            target: "target ≤ \(formatRatio(targetRatio)) plain",
            verdict: comparison.met ? .pass : .miss,
            details: ["rounds: " + comparison.roundsDetail] + details
        ).withRounds(comparison.rounds, atMost: targetRatio)
    }
}

extension S3Server {
    /// Runs `body` with an adapter for `bucket` whose objects are `keyPrefix` + filename (its multipart state
    /// in `folder`), and shuts the adapter down afterwards, whether `body` throws or not.
    func withStorage<T: Sendable>(
        bucket: String, keyPrefix: String, folder: WorkFolder, _ body: (S3RemoteStorage) async throws -> T
    ) async throws -> T {
        let storage = try storage(
            bucket: bucket, keyPrefix: keyPrefix,
            stateDirectory: try folder.makeFolder("state-\(UUID().uuidString.lowercased().prefix(8))"))
        do {
            let result = try await body(storage)
            try await storage.shutdown()
            return result
        } catch {
            try? await storage.shutdown()
            throw error
        }
    }
}

/// Runs `body` on every element of `items`, `concurrency` at a time, and returns the results in the order
/// of `items`.
func concurrentMap<Item: Sendable, Result: Sendable>(
    _ items: [Item], concurrency: Int, _ body: @escaping @Sendable (Item) async throws -> Result
) async throws -> [Result] {
    try await withThrowingTaskGroup(of: (Int, Result).self) { group in
        var results: [Result?] = Array(repeating: nil, count: items.count)
        for (index, item) in items.enumerated() {
            if index >= concurrency, let (done, result) = try await group.next() { results[done] = result }
            group.addTask { (index, try await body(item)) }
        }
        for try await (done, result) in group { results[done] = result }
        return results.compactMap { $0 }
    }
}
