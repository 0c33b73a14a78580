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
    package let spool: TransferFolder
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
        spool = try TransferFolder(folder)
        self.pollInterval = pollInterval
        self.clock = clock
    }

    /// Writes the transfer into `pending/`, durably: the service process runs it from there.
    public func hand(_ transfer: BackgroundTransfer) async throws {
        try TransferFolder.checkId(transfer.id)
        try spool.write(transfer, to: spool.pendingURL(transfer.id))
    }

    /// The transfers in `pending/` without a result.
    public func running() async throws -> Set<String> {
        try spool.ids(in: spool.pending).subtracting(spool.ids(in: spool.results))
    }

    /// The results in `results/`.
    public func results() async throws -> [BackgroundTransferResult] {
        try spool.storedResults()
    }

    /// Removes the result, its body and what is left of the transfer.
    public func acknowledge(_ id: String) async throws {
        try spool.forget(id)
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
