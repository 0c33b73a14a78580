#if canImport(Network)
    import Dispatch
    import Network

    /// Network conditions from `NWPathMonitor` (Apple platforms only): reachable when the path is satisfied,
    /// expensive and constrained as the path says. The default ``AttachmentQueue/Configuration/networkConditions``
    /// on Apple platforms.
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
                        isReachable: path.status == .satisfied, isExpensive: path.isExpensive,
                        isConstrained: path.isConstrained))
            }
            continuation.onTermination = { _ in monitor.cancel() }
            monitor.start(queue: DispatchQueue(label: "AttachmentSync.NWPathNetworkConditions"))
            return stream
        }
    }
#endif
