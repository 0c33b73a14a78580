/// Caps on how many bytes per second a queue's transfers move, like rclone's `--bwlimit`: one for uploads
/// and one for downloads, each shared by all the transfers in that direction.
///
/// ```swift
/// configuration.bandwidthLimit = BandwidthLimit(uploadBytesPerSecond: 1 << 20)  // 1 MiB/s up, downloads free
/// ```
public struct BandwidthLimit: Sendable, Hashable, CustomStringConvertible {
    /// The most bytes per second all uploads together send, or `nil` for no cap.
    public var uploadBytesPerSecond: Int64?
    /// The most bytes per second all downloads together receive, or `nil` for no cap.
    public var downloadBytesPerSecond: Int64?

    /// Creates caps; `nil` leaves a direction free.
    ///
    /// - Parameters:
    ///   - uploadBytesPerSecond: The upload cap, at least 1. The default is `nil`.
    ///   - downloadBytesPerSecond: The download cap, at least 1. The default is `nil`.
    public init(uploadBytesPerSecond: Int64? = nil, downloadBytesPerSecond: Int64? = nil) {
        self.uploadBytesPerSecond = uploadBytesPerSecond
        self.downloadBytesPerSecond = downloadBytesPerSecond
    }

    /// The same cap for uploads and downloads (each direction gets the whole of it).
    public static func both(_ bytesPerSecond: Int64) -> BandwidthLimit {
        BandwidthLimit(uploadBytesPerSecond: bytesPerSecond, downloadBytesPerSecond: bytesPerSecond)
    }

    /// `up 1 MiB/s, down unlimited`, say: binary units (1 KiB is 1,024 bytes), as rclone's `--bwlimit`
    /// and the `attachment-sync` CLI take them.
    public var description: String {
        "up \(Self.rate(uploadBytesPerSecond)), down \(Self.rate(downloadBytesPerSecond))"
    }

    /// `1.5 MiB/s`, `512 KiB/s`, `12 B/s` or `unlimited`: binary units, one decimal at most.
    package static func rate(_ bytesPerSecond: Int64?) -> String {
        guard let bytesPerSecond else { return "unlimited" }
        let (value, unit) = BinaryUnits.scaled(Double(bytesPerSecond))
        guard unit != "B" else { return "\(bytesPerSecond) B/s" }
        let tenths = Int64((value * 10).rounded())
        let number = tenths % 10 == 0 ? "\(tenths / 10)" : "\(tenths / 10).\(tenths % 10)"
        return "\(number) \(unit)/s"
    }

    func validate() throws {
        for (name, value) in [
            ("uploadBytesPerSecond", uploadBytesPerSecond), ("downloadBytesPerSecond", downloadBytesPerSecond),
        ] {
            if let value, value < 1 {
                throw AttachmentError(
                    code: .invalidConfiguration, message: "bandwidthLimit.\(name) must be at least 1, not \(value)",
                    name: "bandwidthLimit.\(name)")
            }
        }
    }
}

/// A token bucket that holds transfers to a rate: each chunk a transfer moves waits until the bucket has
/// room for it. Shared by every transfer of one direction of a queue (see
/// ``AttachmentQueue/Configuration/bandwidthLimit``), and measured on the queue's clock, so a test with a
/// manual clock sees exact times.
///
/// The queue makes the throttle of a transfer's direction ``current`` while it calls the adapter. The
/// library's adapters (the folder remote, S3, presigned and HTTP, the in-memory fake) take from it for every
/// chunk; an adapter of your own honours the cap by doing the same:
///
/// ```swift
/// for try await chunk in body {
///     try await BandwidthThrottle.current?.take(chunk.count)
///     try handle.write(contentsOf: chunk)
/// }
/// ```
public final class BandwidthThrottle: Sendable {
    /// The throttle of the transfer running in this task, or `nil` when its direction has no cap.
    @TaskLocal public static var current: BandwidthThrottle?

    /// The rate it holds transfers to.
    public let bytesPerSecond: Int64
    /// How many bytes may go at once after an idle spell (a burst) before the rate applies: a tenth of a
    /// second's worth.
    public let burstBytes: Int64

    private let clock: any Clock<Duration>
    private let elapsed: @Sendable () -> Duration
    /// The time (on ``elapsed``) by which everything taken so far has gone at the rate.
    private let paidUntil = LockedValue<Duration>(.zero)

    /// Creates a throttle.
    ///
    /// - Parameters:
    ///   - bytesPerSecond: The rate, at least 1.
    ///   - clock: The clock it measures and waits on. The default is a `ContinuousClock`.
    public init(bytesPerSecond: Int64, clock: any Clock<Duration> = ContinuousClock()) {
        self.bytesPerSecond = max(1, bytesPerSecond)
        burstBytes = max(1, self.bytesPerSecond / 10)
        self.clock = clock
        elapsed = Stopwatch.start(clock)
    }

    /// Waits until `count` bytes may move at the rate, then returns.
    ///
    /// - Throws: `CancellationError` when the task is cancelled while it waits.
    public func take(_ count: Int) async throws {
        guard count > 0 else { return }
        let now = elapsed()
        let cost = Self.duration(bytes: Int64(count), rate: bytesPerSecond)
        let burst = Self.duration(bytes: burstBytes, rate: bytesPerSecond)
        let wait = paidUntil.withLock { paid -> Duration in
            paid = max(paid, now) + cost
            return paid - burst - now
        }
        if wait > .zero {
            try await clock.sleep(for: wait)
        } else {
            try Task.checkCancellation()
        }
    }

    /// How long `bytes` take at `rate` bytes per second.
    static func duration(bytes: Int64, rate: Int64) -> Duration {
        let seconds = bytes / rate
        let remainder = bytes % rate
        return .seconds(seconds) + .nanoseconds(Int64((Double(remainder) * 1e9 / Double(rate)).rounded(.up)))
    }
}
