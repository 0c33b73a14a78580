/// What the device's network allows right now: whether remote storage can be reached at all, and whether
/// the path costs the user (cellular data, a personal hotspot) or is restricted (Low Data Mode).
public struct NetworkConditions: Sendable, Hashable, CustomStringConvertible {
    /// Whether there is a network path at all.
    public var isReachable: Bool
    /// Whether the path is metered: cellular data or a personal hotspot.
    public var isExpensive: Bool
    /// Whether the user asked to save data (Low Data Mode).
    public var isConstrained: Bool

    /// Creates conditions.
    ///
    /// - Parameters:
    ///   - isReachable: Whether there is a network path.
    ///   - isExpensive: Whether it is metered. The default is `false`.
    ///   - isConstrained: Whether the user asked to save data. The default is `false`.
    public init(isReachable: Bool, isExpensive: Bool = false, isConstrained: Bool = false) {
        self.isReachable = isReachable
        self.isExpensive = isExpensive
        self.isConstrained = isConstrained
    }

    /// Reachable, neither metered nor constrained: what the queue assumes without a source.
    public static let unrestricted = NetworkConditions(isReachable: true)
    /// No network path.
    public static let offline = NetworkConditions(isReachable: false)
    /// Reachable over a metered path (cellular data).
    public static let expensive = NetworkConditions(isReachable: true, isExpensive: true)
    /// What a queue assumes from its ``AttachmentQueue/Configuration/networkConditions`` source until the
    /// source's first report: reachable (a transfer may try: a failure with no answer is the network's and
    /// spends no attempt), but neither unmetered nor unconstrained, so transfers kept for an unmetered network
    /// (``NetworkPolicy``) wait for the first report instead of starting on what may be cellular data.
    public static let notYetReported = NetworkConditions(isReachable: true, isExpensive: true, isConstrained: true)

    /// Reachable, and neither metered nor constrained.
    public var isUnmetered: Bool { isReachable && !isExpensive && !isConstrained }

    /// `offline`, `unmetered`, or `reachable, expensive, constrained`.
    public var description: String {
        guard isReachable else { return "offline" }
        guard !isUnmetered else { return "unmetered" }
        return (["reachable"] + (isExpensive ? ["expensive"] : []) + (isConstrained ? ["constrained"] : []))
            .joined(separator: ", ")
    }
}

/// Where a queue learns the network's conditions (``AttachmentQueue/Configuration/networkConditions``).
///
/// The library has two: ``ManualNetworkConditions``, driven by the app or a test, and on Apple platforms
/// `NWPathNetworkConditions`, which follows `NWPathMonitor`. Write your own on anything that can say when
/// the network comes and goes.
public protocol NetworkConditionsSource: Sendable {
    /// The current conditions at once, then each change, for as long as the caller iterates.
    func updates() -> AsyncStream<NetworkConditions>
}

/// Network conditions the app or a test sets by hand: on Linux (which has no system monitor the library
/// uses), from an app's own reachability code, or to simulate an outage.
///
/// ```swift
/// let network = ManualNetworkConditions()
/// configuration.networkConditions = network
/// // …
/// network.update(.offline)      // nothing starts; transfers in flight pause
/// network.update(.unrestricted) // a pass runs at once
/// ```
public final class ManualNetworkConditions: NetworkConditionsSource {
    private let state:
        LockedValue<
            (current: NetworkConditions, subscribers: [Int: AsyncStream<NetworkConditions>.Continuation], next: Int)
        >

    /// Creates a source with the given conditions.
    ///
    /// - Parameter initial: The conditions until the first ``update(_:)``. The default is
    ///   ``NetworkConditions/unrestricted``.
    public init(_ initial: NetworkConditions = .unrestricted) {
        state = LockedValue((initial, [:], 0))
    }

    /// The conditions now.
    public var current: NetworkConditions { state.withLock { $0.current } }

    /// Sets the conditions; every subscriber gets them when they differ from the current ones.
    public func update(_ conditions: NetworkConditions) {
        let subscribers = state.withLock { state -> [AsyncStream<NetworkConditions>.Continuation] in
            guard state.current != conditions else { return [] }
            state.current = conditions
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers { subscriber.yield(conditions) }
    }

    /// The current conditions at once, then every ``update(_:)`` that changes them.
    public func updates() -> AsyncStream<NetworkConditions> {
        let (stream, continuation) = AsyncStream.makeStream(
            of: NetworkConditions.self, bufferingPolicy: .bufferingNewest(1))
        let id = state.withLock { state -> Int in
            defer { state.next += 1 }
            state.subscribers[state.next] = continuation
            continuation.yield(state.current)
            return state.next
        }
        continuation.onTermination = { [state] _ in
            _ = state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }
}

/// What a transfer needs from the network before it starts (and to keep going).
public enum NetworkRequirement: Sendable, Hashable {
    /// Any reachable network.
    case any
    /// A network that is neither metered nor constrained (Wi-Fi or Ethernet, no Low Data Mode).
    case unmetered

    /// Whether `conditions` meet the requirement.
    public func isMet(by conditions: NetworkConditions) -> Bool {
        switch self {
        case .any: conditions.isReachable
        case .unmetered: conditions.isUnmetered
        }
    }
}

/// Which transfers wait for an unmetered network (``AttachmentQueue/Configuration/networkPolicy``), by
/// attachment: its size, media type, direction (``Attachment/state``: `queuedUpload` or `queuedDownload`).
///
/// ```swift
/// configuration.networkPolicy = .unmetered(above: 20 * 1024 * 1024)  // large files wait for Wi-Fi
/// configuration.networkPolicy = .custom { $0.mediaType?.hasPrefix("video/") == true ? .unmetered : .any }
/// ```
public struct NetworkPolicy: Sendable {
    /// Decides the requirement of one attachment's transfer.
    public let requirement: @Sendable (Attachment) -> NetworkRequirement

    /// A policy from your closure.
    public static func custom(_ requirement: @escaping @Sendable (Attachment) -> NetworkRequirement) -> NetworkPolicy {
        NetworkPolicy(requirement: requirement)
    }

    /// Every transfer runs on any reachable network.
    public static let any = NetworkPolicy { _ in .any }
    /// Every transfer waits for an unmetered network.
    public static let unmetered = NetworkPolicy { _ in .unmetered }

    /// Files larger than `bytes` (or of unknown size, when `unknownSizeWaits`) wait for an unmetered network.
    ///
    /// - Parameters:
    ///   - bytes: The largest file that moves on a metered network.
    ///   - unknownSizeWaits: Whether a file of unknown size (a download before its first byte) waits too.
    ///     The default is `false`.
    public static func unmetered(above bytes: Int64, unknownSizeWaits: Bool = false) -> NetworkPolicy {
        NetworkPolicy { attachment in
            guard let size = attachment.size else { return unknownSizeWaits ? .unmetered : .any }
            return size > bytes ? .unmetered : .any
        }
    }
}
