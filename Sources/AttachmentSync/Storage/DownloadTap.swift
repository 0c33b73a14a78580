import Foundation

/// How an adapter that wraps another (``EncryptedRemoteStorage``) follows a download while the wrapped
/// adapter writes it, instead of reading the whole file once it is there.
///
/// The wrapper sets ``current`` around the wrapped adapter's download; an adapter that supports it (the HTTP
/// adapters) reports how far the file is written without a gap from byte 0, and when it starts the file over.
/// An adapter that does not report anything still works: the wrapper reads the file when it returns.
package final class DownloadTap: Sendable {
    /// What the wrapped adapter reported last.
    package struct Progress: Sendable, Equatable {
        /// Counts the times the file was started over: bytes read before a change of it may be stale.
        package var generation = 0
        /// Bytes `0..<end` of the file are written, and stay as they are until the file is started over.
        package var end: Int64
    }

    /// The download's tap, for the wrapped adapter to report to; `nil` when no wrapper follows it.
    @TaskLocal package static var current: DownloadTap?

    /// Whether the wrapped adapter may skip hashing what it writes: the wrapper checks the bytes itself.
    package let skipsDigest: Bool
    /// Yields after each report (the latest only); finished by ``finish()``.
    package let reports: AsyncStream<Void>
    private let continuation: AsyncStream<Void>.Continuation
    private let state: LockedValue<Progress>

    /// A tap for a file whose first `end` bytes are written already (a resumed download's).
    package init(writtenUpTo end: Int64, skipsDigest: Bool) {
        self.skipsDigest = skipsDigest
        state = LockedValue(Progress(end: end))
        (reports, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// What was reported last.
    package var progress: Progress { state.withLock { $0 } }

    /// Bytes `0..<end` of the file are written without a gap.
    package func written(upTo end: Int64) {
        let grew = state.withLock { state -> Bool in
            guard end > state.end else { return false }
            state.end = end
            return true
        }
        if grew { continuation.yield() }
    }

    /// Runs `body` unless the file was started over since `generation`, and keeps the wrapped adapter from
    /// starting it over meanwhile: what `body` does to the file (free bytes it no longer needs) cannot touch
    /// bytes of a new start, as long as the wrapped adapter calls ``startedOver(at:)`` before it cuts or
    /// rewrites the file. Returns whether `body` ran.
    @discardableResult
    package func unlessStartedOver(since generation: Int, _ body: () -> Void) -> Bool {
        state.withLock { state in
            guard state.generation == generation else { return false }
            body()
            return true
        }
    }

    /// The file is about to be cut to its first `end` bytes (0: created again) and written anew from there.
    /// Called before the file is cut.
    package func startedOver(at end: Int64 = 0) {
        state.withLock {
            $0.generation += 1
            $0.end = end
        }
        continuation.yield()
    }

    /// No more reports come (the download returned or failed).
    package func finish() { continuation.finish() }
}
