import Dispatch

/// Runs blocking work (a listing of a large folder, say) on a thread of a global dispatch queue instead of
/// one of the few threads of Swift's cooperative pool, which it would hold for as long as the file system
/// takes, and returns its result.
func onBlockingThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global(qos: .utility).async { continuation.resume(with: Result { try work() }) }
    }
}
