import Foundation

/// Times `body` on the wall clock (`ContinuousClock`): this is a benchmark, wall-clock time is the point.
func measure<T>(_ body: () async throws -> T) async rethrows -> (result: T, elapsed: Duration) {
    let clock = ContinuousClock()
    let start = clock.now
    let result = try await body()
    return (result, clock.now - start)
}

/// Times a synchronous `body` on the wall clock.
func measureSync<T>(_ body: () throws -> T) rethrows -> (result: T, elapsed: Duration) {
    let clock = ContinuousClock()
    let start = clock.now
    let result = try body()
    return (result, clock.now - start)
}

extension Duration {
    /// The duration in seconds, as a `Double`.
    var seconds: Double {
        let (whole, attoseconds) = components
        return Double(whole) + Double(attoseconds) / 1e18
    }

    /// The duration in milliseconds, as a `Double`.
    var milliseconds: Double { seconds * 1000 }
}

/// Formats a duration for a report line: `4.12 s`, `87.3 ms` or `412 µs`.
func formatDuration(_ duration: Duration) -> String {
    let seconds = duration.seconds
    if seconds >= 1 { return String(format: "%.2f s", seconds) }
    if seconds >= 0.001 { return String(format: "%.1f ms", seconds * 1000) }
    return String(format: "%.0f µs", seconds * 1e6)
}

/// Formats a byte count in MiB with one decimal (`38.2 MiB`), or in GiB from 1 GiB on (`1 GiB`).
func formatMiB(_ bytes: Int64) -> String {
    if bytes >= 1 << 30 { return String(format: "%g GiB", Double(bytes) / 1_073_741_824) }
    return String(format: "%.1f MiB", Double(bytes) / 1_048_576)
}

/// Formats a ratio with two significant decimals: `7.62×`.
func formatRatio(_ ratio: Double) -> String {
    String(format: "%.2f×", ratio)
}

/// Formats a count with thousands separators: `100,000`.
func formatCount(_ count: Int) -> String {
    let digits = String(count)
    var result = ""
    for (index, digit) in digits.enumerated() {
        if index > 0 && (digits.count - index) % 3 == 0 { result.append(",") }
        result.append(digit)
    }
    return result
}

/// The value at `fraction` (0…1) of the sorted samples, nearest-rank: `percentile(samples, 0.99)` is the
/// p99. The samples must not be empty.
func percentile(_ samples: [Duration], _ fraction: Double) -> Duration {
    let sorted = samples.sorted()
    guard !sorted.isEmpty else { return .zero }
    let rank = Int((fraction * Double(sorted.count)).rounded(.up)) - 1
    return sorted[min(max(rank, 0), sorted.count - 1)]
}

/// The median of the samples (the lower middle one for an even count).
func median(_ samples: [Duration]) -> Duration {
    percentile(samples, 0.5)
}

/// Deterministic, distinct content for test file number `index`: `size` pseudo-random bytes (xorshift),
/// so two files never share their bytes and a file mixed up with another fails the byte check.
func content(index: Int, size: Int) -> Data {
    var state = UInt64(truncatingIfNeeded: index) &* 0x9E37_79B9_7F4A_7C15 | 1
    func next() -> UInt64 {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        return state.littleEndian
    }
    var data = Data(count: size)
    data.withUnsafeMutableBytes { buffer in
        var offset = 0
        while offset + 8 <= buffer.count {
            buffer.storeBytes(of: next(), toByteOffset: offset, as: UInt64.self)
            offset += 8
        }
        if offset < buffer.count {
            withUnsafeBytes(of: next()) { word in
                for byte in word.prefix(buffer.count - offset) {
                    buffer[offset] = byte
                    offset += 1
                }
            }
        }
    }
    return data
}

/// A table size as a short label: `1M`, `100k`, `10k`, `500`.
func formatSizeLabel(_ count: Int) -> String {
    if count >= 1_000_000, count % 1_000_000 == 0 { return "\(count / 1_000_000)M" }
    if count >= 1000, count % 1000 == 0 { return "\(count / 1000)k" }
    return formatCount(count)
}
