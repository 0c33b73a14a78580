/// Which ids saves and transfers touched while startup's background check of files runs: their files may
/// be newer than what the check read, so it leaves them alone. A sub-machine of ``QueueStateMachine``: no
/// I/O.
struct StartupLedger: Sendable {
    /// Every id touched since the check began (and those busy when it began); `nil` when no check runs.
    private(set) var touched: Set<String>?

    /// The check begins, with the ids busy now.
    mutating func begin(busy: Set<String>) {
        touched = busy
    }

    mutating func end() {
        touched = nil
    }

    /// A save reserved `id` or a transfer of it started.
    mutating func note(_ id: String) {
        touched?.insert(id)
    }
}
