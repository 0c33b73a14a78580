import AttachmentSync

/// Formats the demo's numbers: byte counts, durations and the final table of states per device.
enum DemoReport {
    /// A byte count for people, in binary units (the ones `--bwlimit` and `--budget` take): `900 B`,
    /// `20.0 KiB`, `1.4 MiB`, up to `8.0 EiB` (`Int64.max`, where sums of sizes saturate).
    static func bytes(_ count: some BinaryInteger) -> String {
        let (value, unit) = BinaryUnits.scaled(Double(count))
        return unit == "B" ? "\(count) B" : "\(oneDecimal(value)) \(unit)"
    }

    /// A duration in seconds with two decimals: `0.42 s`.
    static func seconds(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        let hundredths = (Double(seconds) + Double(attoseconds) / 1e18) * 100
        let rounded = Int(hundredths.rounded())
        let fraction = rounded % 100
        return "\(rounded / 100).\(fraction < 10 ? "0" : "")\(fraction) s"
    }

    /// A duration in seconds with as many decimals as it needs, up to three: `60 s`, `0.5 s`, `0.001 s`.
    static func shortSeconds(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        let milliseconds = Int64((Double(attoseconds) / 1e15).rounded())
        guard milliseconds > 0 else { return "\(seconds) s" }
        var fraction = String(milliseconds)
        fraction = String(repeating: "0", count: max(0, 3 - fraction.count)) + fraction
        while fraction.hasSuffix("0") { fraction.removeLast() }
        return "\(seconds).\(fraction) s"
    }

    /// The final table: one row per device with its record count per state, the files in its attachments
    /// folder and their size; a last row for the remote folder, which has files but no records.
    static func table(devices: [(name: String, snapshot: DemoSnapshot)], remote: DemoSnapshot) -> [String] {
        let header = ["", "queuedDownload", "queuedUpload", "queuedDelete", "synced", "archived", "files", "bytes"]
        var rows: [[String]] = []
        for (name, snapshot) in devices {
            var row = [name]
            row += [.queuedDownload, .queuedUpload, .queuedDelete, .synced, .archived].map {
                String(snapshot.count($0))
            }
            row += [String(snapshot.files.count), bytesWithUnit(snapshot.bytesOnDisk)]
            rows.append(row)
        }
        rows.append(
            ["remote", "-", "-", "-", "-", "-", String(remote.files.count), bytesWithUnit(remote.bytesOnDisk)])
        let all = [header] + rows
        let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        return all.map { row in
            row.indices.map { column in
                // The first column (names) is left-aligned, the numbers right-aligned.
                column == 0 ? pad(row[column], to: widths[column]) : padLeft(row[column], to: widths[column])
            }
            .joined(separator: "  ")
        }
    }

    /// `2203123 B (2.1 MiB)`: exact, then readable.
    /// A 20-cell bar and a percentage for `fraction` (0 to 1).
    static func progressBar(_ fraction: Double) -> String {
        let clamped = min(max(fraction, 0), 1)
        let filled = Int((clamped * 20).rounded(.down))
        return "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: 20 - filled) + "] "
            + String(format: "%3d%%", Int((clamped * 100).rounded(.down)))
    }

    static func bytesWithUnit(_ count: Int) -> String {
        count < 1024 ? "\(count) B" : "\(count) B (\(bytes(count)))"
    }

    private static func oneDecimal(_ value: Double) -> String {
        let tenths = Int((value * 10).rounded())
        return "\(tenths / 10).\(tenths % 10)"
    }

    private static func pad(_ text: String, to width: Int) -> String {
        text + String(repeating: " ", count: max(0, width - text.count))
    }

    private static func padLeft(_ text: String, to width: Int) -> String {
        String(repeating: " ", count: max(0, width - text.count)) + text
    }
}
