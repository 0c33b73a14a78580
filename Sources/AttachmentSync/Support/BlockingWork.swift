import Dispatch

/// Runs blocking work (a listing of a large folder, a flush to stable storage) on a thread of a global
/// dispatch queue instead of one of the few threads of Swift's cooperative pool, which it would hold for as
/// long as the file system takes (and with it an actor whose method called it), and returns its result.
///
/// The work runs at the quality of service of the calling task's priority, so a save the user is waiting
/// for is not flushed at a background class.
func onBlockingThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    let priority = Task.currentPriority
    let qos: DispatchQoS.QoSClass =
        priority >= .high ? .userInitiated : priority >= .medium ? .default : priority >= .low ? .utility : .background
    return try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global(qos: qos).async { continuation.resume(with: Result { try work() }) }
    }
}
