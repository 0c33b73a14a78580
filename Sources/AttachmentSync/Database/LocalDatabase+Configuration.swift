import Foundation
import Logging

extension LocalDatabase {
    /// Options for opening a database.
    public struct Configuration: Sendable {
        /// How long a write waits for a lock held by another process (another app extension, say) before it
        /// fails. The default is 5 seconds.
        public var busyTimeout: TimeInterval = 5
        /// The most read connections a file database opens at once. The default is 5.
        public var maximumReaderCount: Int = 5
        /// How often watches look for commits made by other processes: an app's share extension or widget
        /// writing to a database in an App Group container, a command-line tool. SQLite tells this
        /// process nothing of them, so while at least one watch is active the database asks SQLite (`PRAGMA
        /// data_version`, a counter only other connections' commits move) and, when it moved, has every
        /// watch read its query again (each yields only if its result changed). `nil` never looks. The
        /// default is 1 second.
        public var otherProcessesCheckInterval: Duration? = .seconds(1)
        /// The clock of ``otherProcessesCheckInterval`` (tests drive a manual one). The default is a
        /// `ContinuousClock`.
        public var clock: any Clock<Duration> = ContinuousClock()
        /// Where schema changes are logged (at `debug` level). The default discards everything.
        public var logger: Logger = Logger(label: "AttachmentSync.LocalDatabase") { _ in SwiftLogNoOpLogHandler() }

        /// Creates a configuration with the defaults.
        public init() {}
    }
}
