import Foundation

/// Makes the demo's "photos": deterministic pseudo-random bytes framed like a JPEG file (start-of-image
/// and JFIF marker in front, end-of-image marker last), of varied sizes between 20 and 200 KiB.
///
/// They are not images; they only need to be recognisable and byte-for-byte reproducible, so that every
/// copy can be compared with the original. The same index always gives the same bytes.
struct DemoPhotos: Sendable {
    /// The smallest photo, in bytes.
    static let minimumSize = 20 * 1024
    /// The largest photo, in bytes.
    static let maximumSize = 200 * 1024

    /// The bytes every photo starts with: start of image, then a JFIF application segment header.
    static let header: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 0x4A, 0x46, 0x49, 0x46, 0x00]
    /// The bytes every photo ends with: end of image.
    static let trailer: [UInt8] = [0xFF, 0xD9]

    /// The photo number `index`.
    func photo(_ index: Int) -> Data {
        var generator = SplitMix64(seed: 0x5EED_0000 &+ UInt64(truncatingIfNeeded: index))
        let span = UInt64(Self.maximumSize - Self.minimumSize + 1)
        let size = Self.minimumSize + Int(generator.next() % span)
        // Whole 64-bit words of noise, cut to size; then the markers go over both ends.
        let words = (0..<(size + 7) / 8).map { _ in generator.next().littleEndian }
        var data = words.withUnsafeBytes { Data($0.prefix(size)) }
        data.replaceSubrange(0..<Self.header.count, with: Self.header)
        data.replaceSubrange((size - Self.trailer.count)..<size, with: Self.trailer)
        return data
    }
}

/// A small, fast pseudo-random generator with a fixed sequence per seed (SplitMix64), so the demo's
/// photos are the same on every run and every platform.
struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// A generator whose sequence is determined by `seed`.
    init(seed: UInt64) {
        state = seed
    }

    /// The next 64 pseudo-random bits.
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
