#if canImport(Network)
    import Dispatch
    import Network

    /// Network conditions from `NWPathMonitor` (Apple platforms only): reachable unless the path is
    /// `.unsatisfied` (a path that `.requiresConnection`, such as a VPN on demand or a cellular interface that
    /// wakes for a connection, comes up when a transfer connects), expensive and constrained as the path
    /// says. Until its first report the queue assumes ``NetworkConditions/notYetReported``. The default
    /// ``AttachmentQueue/Configuration/networkConditions`` on Apple platforms.
    ///
    /// Not on watchOS: there `NWPathMonitor` is low-level networking, which watchOS 9 and later allow only to
    /// audio-streaming and VoIP apps while they stream or call; for any other app the path stays
    /// `.unsatisfied` (Apple's TN3135), and the queue would never transfer. The default there is `nil`.
    ///
    /// Each ``updates()`` call starts a monitor of its own, cancelled when the caller stops iterating.
    public struct NWPathNetworkConditions: NetworkConditionsSource {
        /// Creates a source for every interface.
        public init() {}

        /// The path's conditions as the monitor first reports them, then each change.
        public func updates() -> AsyncStream<NetworkConditions> {
            let (stream, continuation) = AsyncStream.makeStream(
                of: NetworkConditions.self, bufferingPolicy: .bufferingNewest(1))
            let monitor = NWPathMonitor()
            monitor.pathUpdateHandler = { path in
                continuation.yield(
                    NetworkConditions(
                        isReachable: path.status != .unsatisfied, isExpensive: path.isExpensive,
                        isConstrained: path.isConstrained))
            }
            continuation.onTermination = { _ in monitor.cancel() }
            monitor.start(queue: DispatchQueue(label: "AttachmentSync.NWPathNetworkConditions"))
            return stream
        }
    }
#endif
