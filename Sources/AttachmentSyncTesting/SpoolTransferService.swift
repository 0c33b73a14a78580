import AttachmentSync
import Foundation

/// A `BackgroundTransferService` whose transfers run in another process: the test stand-in, on Linux, for
/// a background `URLSession`.
///
/// The two sides share a folder (the spool). ``hand(_:)`` writes the transfer durably into `pending/`; the
/// service process (`attachment-sync-transfer-service SPOOL`, a test executable of this package) runs every
/// pending transfer, writes a download's body into `bodies/` and then the result into `results/`, and only
/// then removes the transfer from `pending/`. So the service goes on whether the process that handed the
/// transfers is alive or not, a service killed mid-transfer runs the transfer again when it restarts, and a
/// result stays until ``acknowledge(_:)`` removes it. Every file appears under its final name by a rename,
/// flushed with its folder: a crash of either side leaves whole files or none.
public final class SpoolTransferService: BackgroundTransferService {
    /// The spool folder.
    public let spool: SpoolFolder
    private let clock: any Clock<Duration>
    private let pollInterval: Duration

    /// Opens the spool at `folder`, creating its subfolders.
    ///
    /// - Parameters:
    ///   - folder: The spool folder the service process works from.
    ///   - pollInterval: How often ``resultsMayHaveArrived()`` looks for new results. The default is 20 ms.
    ///   - clock: The clock it waits with. The default is `ContinuousClock()`.
    public init(
        folder: URL, pollInterval: Duration = .milliseconds(20), clock: any Clock<Duration> = ContinuousClock()
    ) throws {
        spool = try SpoolFolder(folder)
        self.pollInterval = pollInterval
        self.clock = clock
    }

    /// Writes the transfer into `pending/`, durably: the service process runs it from there.
    public func hand(_ transfer: BackgroundTransfer) async throws {
        try SpoolFolder.checkId(transfer.id)
        try spool.write(transfer, to: spool.pendingURL(transfer.id))
    }

    /// The transfers in `pending/` without a result.
    public func running() async throws -> Set<String> {
        try spool.ids(in: spool.pending).subtracting(spool.ids(in: spool.results))
    }

    /// The results in `results/`.
    public func results() async throws -> [BackgroundTransferResult] {
        try spool.ids(in: spool.results).sorted().compactMap { id in
            try spool.read(BackgroundTransferResult.self, from: spool.resultURL(id))
        }
    }

    /// Removes the result, its body and what is left of the transfer.
    public func acknowledge(_ id: String) async throws {
        try SpoolFolder.checkId(id)
        // The result first: a crash part-way leaves no result naming a body already gone (at worst an
        // orphan body file, which the next acknowledgement of the id removes).
        for url in [spool.resultURL(id), spool.bodyURL(id), spool.pendingURL(id)] {
            try spool.remove(url)
        }
    }

    /// Yields when `results/` holds a result it did not hold at the last look (one look per poll interval).
    public func resultsMayHaveArrived() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let spool = spool
        let clock = clock
        let interval = pollInterval
        let task = Task {
            var seen: Set<String> = []
            while !Task.isCancelled {
                let now = (try? spool.ids(in: spool.results)) ?? []
                if !now.subtracting(seen).isEmpty { continuation.yield() }
                seen = now
                do { try await clock.sleep(for: interval) } catch { break }
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }
}

/// The layout of a spool folder and the durable writes both sides make in it.
public struct SpoolFolder: Sendable {
    /// The spool folder.
    public let root: URL
    /// Transfers handed over and not finished: `pending/<id>.json`.
    public var pending: URL { root.appendingPathComponent("pending") }
    /// Results not acknowledged: `results/<id>.json`.
    public var results: URL { root.appendingPathComponent("results") }
    /// Downloads' bodies: `bodies/<id>`.
    public var bodies: URL { root.appendingPathComponent("bodies") }

    /// Opens `root`, creating its subfolders.
    public init(_ root: URL) throws {
        self.root = root
        for name in ["pending", "results", "bodies"] {
            let folder = root.appendingPathComponent(name)
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        }
    }

    /// Where the transfer `id` waits: `pending/<id>.json`.
    public func pendingURL(_ id: String) -> URL { pending.appendingPathComponent(id + ".json") }
    /// Where the result of `id` is kept: `results/<id>.json`.
    public func resultURL(_ id: String) -> URL { results.appendingPathComponent(id + ".json") }
    /// Where the body of the download `id` is kept: `bodies/<id>`.
    public func bodyURL(_ id: String) -> URL { bodies.appendingPathComponent(id) }

    /// Throws unless `id` can name a file: letters, digits, `-` and `_`, 1 to 128 of them.
    public static func checkId(_ id: String) throws {
        let allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
        guard (1...128).contains(id.count), id.unicodeScalars.allSatisfy(allowed.contains) else {
            throw AttachmentError(
                code: .invalidName, message: "\(String(reflecting: id)) cannot name a spooled transfer", name: id)
        }
    }

    /// The ids of the `.json` files in `folder` (not the temporary files being written there).
    public func ids(in folder: URL) throws -> Set<String> {
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        return Set(names.filter { $0.hasSuffix(".json") && !$0.hasPrefix(".") }.map { String($0.dropLast(5)) })
    }

    /// Writes `value` as JSON to `url` durably: a temporary name, flushed, renamed, the folder flushed.
    public func write(_ value: some Encodable, to url: URL) throws {
        try SpoolFolder.checkId(url.deletingPathExtension().lastPathComponent)
        let data = try JSONEncoder().encode(value)
        try install(url) { temporary in try data.write(to: temporary) }
    }

    /// Makes the file `url` durably from what `fill` writes at a temporary name beside it.
    public func install(_ url: URL, _ fill: (URL) throws -> Void) throws {
        let temporary = url.deletingLastPathComponent().appendingPathComponent(
            ".tmp-\(UUID().uuidString)-\(url.lastPathComponent)")
        do {
            try fill(temporary)
            try Self.flush(temporary.path, directory: false)
            guard rename(temporary.path, url.path) == 0 else {
                throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: url.path])
            }
            try Self.flush(url.deletingLastPathComponent().path, directory: true)
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            throw error
        }
    }

    /// The JSON value at `url`, or `nil` when there is none.
    public func read<T: Decodable>(_ type: T.Type, from url: URL) throws -> T? {
        guard let data = FileManager.default.contents(atPath: url.path) else { return nil }
        return try JSONDecoder().decode(type, from: data)
    }

    /// Removes `url` (nothing there is fine) and flushes its folder.
    public func remove(_ url: URL) throws {
        guard FileManager.default.fileExists(atPath: url.path) else { return }
        try FileManager.default.removeItem(at: url)
        try Self.flush(url.deletingLastPathComponent().path, directory: true)
    }

    private static func flush(_ path: String, directory: Bool) throws {
        let descriptor = open(path, directory ? O_RDONLY | O_DIRECTORY : O_RDONLY)
        guard descriptor >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    }
}
