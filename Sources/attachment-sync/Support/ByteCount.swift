/// Byte counts as the CLI's options take them (`--bwlimit`, `--budget`): one syntax and one unit system
/// everywhere, binary as in rclone's `--bwlimit`, and as the CLI prints sizes and rates (KiB, MiB…).
enum ByteCount {
    /// The syntax, for messages.
    static let syntax =
        "a number with an optional K, M, G or T (multiples of 1024: 1M is 1 MiB), like 300000, 512K, 1.5M or 1MiB"

    /// `text` as bytes: a number (a decimal fraction allowed) with an optional K, M, G or T in either case,
    /// which may be followed by `iB`; rounded to a whole byte. `nil` for anything else (`1MB`, whose unit is
    /// ambiguous, included), a negative number or more than `Int64.max` bytes.
    static func parse(_ text: String) -> Int64? {
        var number = Substring(text.trimmingCharacters(in: .whitespaces))
        if number.lowercased().hasSuffix("ib") { number = number.dropLast(2) }
        let multipliers: [Character: Double] = ["k": 0x400, "m": 0x10_0000, "g": 0x4000_0000, "t": 0x100_0000_0000]
        var multiplier = 1.0
        if let last = number.last.map({ Character($0.lowercased()) }), let factor = multipliers[last] {
            multiplier = factor
            number = number.dropLast()
        } else if number.count < text.trimmingCharacters(in: .whitespaces).count {
            return nil  // "iB" without a K, M, G or T
        }
        guard !number.isEmpty, number.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
            let value = Double(number), value.isFinite
        else { return nil }
        let bytes = (value * multiplier).rounded()
        guard bytes >= 0, bytes < 9_223_372_036_854_775_807.0 else { return nil }
        return Int64(bytes)
    }
}
