import Foundation

/// A value guarded by a lock, for the little shared state that lives outside actors (a database's
/// open/closed flag and its registry of watches, the testing module's manual clock). `package`, so the
/// package's other modules share this one implementation.
///
/// `@unchecked Sendable` is safe here: the only stored state is `value`, which is `private` and read or
/// written only inside `withLock`, under `lock`; `Value` itself is `Sendable`, so what `withLock` returns
/// may cross isolation domains. (`Synchronization.Mutex` would do the same but needs macOS 15 / iOS 18.)
package final class LockedValue<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    package init(_ value: Value) {
        self.value = value
    }

    package func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
