import Foundation

/// A value guarded by a lock, for the little shared state that lives outside actors (a database's
/// open/closed flag and its registry of watches).
///
/// `@unchecked Sendable` is safe here: the only stored state is `value`, which is `private` and read or
/// written only inside `withLock`, under `lock`; `Value` itself is `Sendable`, so what `withLock` returns
/// may cross isolation domains. (`Synchronization.Mutex` would do the same but needs macOS 15 / iOS 18.)
final class LockedValue<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) {
        self.value = value
    }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
