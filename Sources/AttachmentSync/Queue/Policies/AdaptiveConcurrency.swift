/// How many transfers may run at once while remote storage pushes back: additive increase, multiplicative
/// decrease (as the AWS SDKs' adaptive retry mode does). A plain value with no I/O.
///
/// The limit starts at the configured maximum. A transfer refused as overloaded (429, 503 SlowDown, a
/// `Retry-After`: see ``RemoteOverloadSignal``; not a failed connection, which is an offline device more
/// often than a busy server) halves it, at most once per generation: the refusals of transfers that started before the
/// last decrease were caused by the old limit and do not halve it again. Each finished transfer then adds
/// 1/limit, so the limit grows by about one per limit's worth of good answers, back up to the maximum.
struct AdaptiveConcurrency: Sendable, Equatable {
    /// The configured ``AttachmentQueue/Configuration/maxConcurrentTransfers``.
    let maximum: Int
    /// Whether refusals lower the limit at all (``AttachmentQueue/Configuration/adaptiveConcurrency``).
    let isEnabled: Bool
    private(set) var limit: Double
    /// Bumped by each decrease; a transfer remembers the generation it started in.
    private(set) var generation = 0

    init(maximum: Int, isEnabled: Bool = true) {
        self.maximum = max(1, maximum)
        self.isEnabled = isEnabled
        limit = Double(self.maximum)
    }

    /// The most transfers to run now: at least 1, at most ``maximum``.
    var current: Int { max(1, min(maximum, Int(limit))) }

    /// A transfer finished with an answer (success, or a failure that is not overload).
    mutating func answered() {
        limit = min(Double(maximum), limit + 1 / limit)
    }

    /// A transfer that started in `startedIn` was refused as overloaded.
    mutating func refused(startedIn: Int) {
        guard isEnabled, startedIn == generation else { return }
        limit = max(1, (limit / 2).rounded(.down))
        generation += 1
    }
}

/// An error that says whether remote storage refused because it is overloaded (HTTP 429, 503 SlowDown)
/// rather than unreachable: the queue runs fewer transfers at once after such refusals (see
/// ``AttachmentQueue/Configuration/adaptiveConcurrency``), but not because the device is offline.
///
/// `AttachmentSyncS3`'s `RemoteHTTPError` conforms. An adapter of your own can throw
/// ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/remoteUnavailable`` and, as its
/// ``AttachmentError/underlying``, an error conforming to this; an ``AttachmentError/retryAfter`` counts as
/// overload too.
public protocol RemoteOverloadSignal: Error {
    /// Whether the remote refused because it is overloaded.
    var isOverload: Bool { get }
}

extension AdaptiveConcurrency {
    /// Whether `error` is remote storage refusing as overloaded: ``AttachmentError/Code-swift.struct/remoteUnavailable``
    /// with a `Retry-After`, or with an underlying ``RemoteOverloadSignal`` that says so. A connection that
    /// fails (an offline device) is not.
    static func isOverload(_ error: any Error) -> Bool {
        guard let error = error as? AttachmentError, error.code == .remoteUnavailable else {
            return (error as? any RemoteOverloadSignal)?.isOverload ?? false
        }
        if error.retryAfter != nil { return true }
        return (error.underlying as? any RemoteOverloadSignal)?.isOverload ?? false
    }
}
