import AttachmentSync

/// The slowest a transfer may move before the adapter stops it: at least ``bytes`` in every ``window``.
///
/// A server (or a proxy, or a network) that trickles bytes would otherwise hold a transfer, and the queue's
/// slot for it, for as long as it likes: the request timeout only fires when nothing at all arrives. The
/// adapters measure each object transfer (an upload's body sent, a download's body received, and the wait
/// for the response in between) in consecutive windows; a window that moves fewer than ``bytes`` stops the
/// transfer with `AttachmentError.Code.remoteUnavailable`, which the queue
/// retries later with backoff (a download resumes where it stopped, a multipart upload with its missing
/// parts). So a transfer of `n` bytes can take at most about `n / bytes` windows, whatever the server does.
///
/// ```swift
/// var configuration = S3RemoteStorage.Configuration(…)
/// // Links slower than 4 KiB a minute are given up on (and tried again later).
/// configuration.minimumTransferRate = MinimumTransferRate(bytes: 4096, per: .seconds(60))
/// ```
public struct MinimumTransferRate: Sendable, Hashable, CustomStringConvertible {
    /// The fewest bytes a transfer must move in each window.
    public var bytes: Int64
    /// How long each window lasts.
    public var window: Duration

    /// A rate of `bytes` per `window`.
    ///
    /// - Parameters:
    ///   - bytes: The fewest bytes a transfer must move in each window; at least 1.
    ///   - window: The length of a window; positive.
    public init(bytes: Int64, per window: Duration) {
        self.bytes = bytes
        self.window = window
    }

    /// The adapters' default: 16 KiB in every 30 seconds (about 0.5 KiB/s, far below any usable link).
    public static let `default` = MinimumTransferRate(bytes: 16 * 1024, per: .seconds(30))

    /// `16384 bytes per 30.0 seconds`, say.
    public var description: String { "\(bytes) bytes per \(window)" }

    /// Throws `invalidConfiguration` naming `option` unless both numbers are positive.
    func validate(as option: String) throws {
        guard bytes >= 1, window > .zero else {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "\(option) must move at least 1 byte in a positive window, not \(self)", name: option)
        }
    }
}
