/// Byte counts for people, in binary units (1 KiB = 1,024 bytes), as the bandwidth cap's description and
/// the command-line tool print them.
package enum BinaryUnits {
    /// `count` in the largest unit it reaches, up to EiB: the scaled value and the unit's name (`B` below
    /// 1 KiB).
    package static func scaled(_ count: Double) -> (value: Double, unit: String) {
        let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
        var value = count
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return (value, units[unit])
    }
}
