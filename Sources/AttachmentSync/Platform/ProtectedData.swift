import Foundation

#if canImport(UIKit) && !os(watchOS)
    import UIKit

    /// When the device's protected data becomes readable again (iOS, iPadOS, tvOS, visionOS, Mac Catalyst):
    /// the user unlocked the device, so files of the `complete` Data Protection class can be read.
    enum ProtectedData {
        /// One element at each `UIApplication.protectedDataDidBecomeAvailableNotification` until the
        /// caller stops iterating. The notification's name is usable in app extensions (only
        /// `UIApplication.shared` is not).
        static func unlocks() -> AsyncStream<Void>? {
            AsyncStream(bufferingPolicy: .bufferingNewest(1)) { continuation in
                let observer = Observer(
                    NotificationCenter.default.addObserver(
                        forName: UIApplication.protectedDataDidBecomeAvailableNotification, object: nil,
                        queue: nil
                    ) { _ in continuation.yield() })
                continuation.onTermination = { _ in NotificationCenter.default.removeObserver(observer.token) }
            }
        }

        /// The observation token, carried to the termination handler. `@unchecked Sendable`: the token is
        /// an opaque object this code never reads or changes; it is only handed to
        /// `NotificationCenter.removeObserver(_:)`, which Apple documents as safe to call from any thread.
        private final class Observer: @unchecked Sendable {
            let token: any NSObjectProtocol
            init(_ token: any NSObjectProtocol) { self.token = token }
        }
    }
#else
    /// Where no system tells of protected data coming back (Linux, macOS, watchOS): `nil`. The queue finds
    /// out at its next transfer that reaches the files.
    enum ProtectedData {
        static func unlocks() -> AsyncStream<Void>? { nil }
    }
#endif
