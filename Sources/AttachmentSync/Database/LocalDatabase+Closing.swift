import Foundation
import GRDB

extension LocalDatabase {
    /// Ends every watch, waits for reads and writes in progress, and closes the database's connections.
    /// Later calls throw ``LocalDatabaseError/Code-swift.struct/closed``. Closing twice is harmless.
    ///
    /// The waiting happens off Swift's cooperative thread pool, so it is safe while other tasks still use
    /// the database.
    public func close() async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            blockingQueue.async {
                do {
                    try self.close()
                    continuation.resume()
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    /// Ends every watch and closes the database's connections, blocking the calling thread until reads
    /// and writes in progress have finished. Later calls throw ``LocalDatabaseError/Code-swift.struct/closed``.
    /// Closing twice is harmless.
    ///
    /// From async code, call the `async` overload (`try await db.close()`): blocking one of the
    /// cooperative pool's threads while other tasks' reads wait to resume on them can stall the process.
    public func close() throws {
        let watches = state.withLock { state -> [RegisteredWatch] in
            guard !state.isClosed else { return [] }
            state.isClosed = true
            defer { state.watches = [:] }
            return Array(state.watches.values)
        }
        for watch in watches {
            watch.cancellable.cancel()
            watch.finish()
        }
        try LocalDatabaseError.converting {
            try sqlChecker?.close()
            try writer.close()
        }
    }

    /// Whether `close()` has been called.
    public var isClosed: Bool { state.withLock { $0.isClosed } }

    func ensureOpen() throws {
        if isClosed {
            throw LocalDatabaseError(code: .closed, message: "the database is closed", path: path)
        }
    }
}
