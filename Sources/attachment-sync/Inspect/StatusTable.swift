import AttachmentSync
import Foundation

/// The `status` report for people: short sections, sizes in binary units, nothing when a section is empty.
struct StatusTable {
    let report: AttachmentTableReport
    let database: String

    var text: String {
        let status = report.status
        var lines: [String] = []
        lines.append(
            "\(report.recordCount) attachment\(report.recordCount == 1 ? "" : "s") in table "
                + "\(report.table) of \(database)")
        lines.append("")
        lines.append(row("state", "count", "bytes"))
        for state in AttachmentState.allCases {
            let totals = status.states[state]
            lines.append(
                row(Self.name(state), "\(totals?.count ?? 0)", DemoReport.bytes(totals?.bytes ?? 0))
                    + (totals.map(Self.leftOut) ?? ""))
        }
        if status.states.values.contains(where: { $0.bytes == .max }) {
            lines.append("(a total of 8.0 EiB is the most a total holds: the sizes add up to more)")
        }
        if !report.invalidSizes.isEmpty {
            let count = status.states.values.reduce(0) { $0 + $1.invalidSizeCount }
            lines.append("")
            lines.append(
                "sizes that are not byte counts (\(count); left out of every total, the table holds them as shown):")
            for entry in report.invalidSizes.prefix(20) {
                lines.append(
                    "  \(entry.id)  \(entry.state.map(Self.name) ?? "unknown state")  size "
                        + Self.oneLine("\(entry.size.storageClass) \(entry.size)", limit: 60))
            }
            if count > 20 { lines.append("  … and \(count - 20) more") }
        }
        let cache = status.cache
        lines.append("")
        lines.append(
            "on this device: \(DemoReport.bytes(cache.usedBytes))"
                + (cache.budget.map { " of a \(DemoReport.bytes($0)) budget" } ?? ""))
        lines.append(
            "  evictable \(DemoReport.bytes(cache.evictableBytes)), pinned \(DemoReport.bytes(cache.pinnedBytes)), "
                + "never uploaded \(DemoReport.bytes(cache.notUploadedBytes)), downloaded or queued "
                + "\(DemoReport.bytes(cache.keptBytes))")
        if cache.cannotMeetBudget {
            lines.append("  the budget cannot be met: what may not be evicted is more than that")
        } else if let budget = cache.budget, cache.usedBytes > budget {
            lines.append("  over the budget until the queue's next pass evicts")
        }
        if status.localOnly.count > 0 {
            lines.append(
                "only on this device: \(status.localOnly.count) attachment\(status.localOnly.count == 1 ? "" : "s"), "
                    + "\(DemoReport.bytes(status.localOnly.bytes)) never uploaded")
        }
        if !status.waitingForRetry.isEmpty {
            lines.append("")
            lines.append("waiting for a retry (\(status.waitingForRetry.count)):")
            for retry in status.waitingForRetry {
                let what =
                    if retry.awaitingUpload > 0 {
                        "not uploaded yet by the device that saved it (asked \(retry.awaitingUpload)×)"
                    } else if retry.localFileFailures > 0 {
                        "its local file cannot be read or written now (\(retry.localFileFailures)× in a row, no "
                            + "attempt spent; nothing is given up)"
                    } else if retry.keyFailures > 0 {
                        "its encryption key is not on this device (\(retry.keyFailures)× in a row, no attempt "
                            + "spent; nothing is given up)"
                    } else if retry.networkFailures > 0 {
                        "no answer from remote storage (\(retry.networkFailures)× in a row, no attempt spent)"
                    } else {
                        "attempt \(retry.attempts)"
                    }
                lines.append(
                    "  \(retry.attachmentId)  \(Self.name(retry.state))  \(what)  next "
                        + "\(Self.date(retry.nextAttemptAt))" + (retry.lastError.map { "  \(Self.oneLine($0))" } ?? ""))
            }
        }
        if !status.givenUp.isEmpty {
            lines.append("")
            lines.append("given up (\(status.givenUp.count); retry them from the app):")
            for entry in status.givenUp {
                lines.append(
                    "  \(entry.attachmentId)  \(Self.name(entry.state)) after \(entry.attempts) attempt"
                        + "\(entry.attempts == 1 ? "" : "s")"
                        + (entry.isLocalOnly ? "  (only copy on this device)" : "")
                        + (entry.lastError.map { "  \(Self.oneLine($0))" } ?? ""))
            }
        }
        if !report.largest.isEmpty {
            lines.append("")
            lines.append("largest:")
            for entry in report.largest {
                let size = DemoReport.bytes(entry.size ?? 0)
                lines.append(
                    "  " + String(repeating: " ", count: max(0, 10 - size.count)) + size
                        + "  \(entry.id)  \(Self.name(entry.state))"
                        + (entry.contentAvailable ? "" : "  (not on this device)"))
            }
        }
        return lines.joined(separator: "\n")
    }

    private func row(_ name: String, _ count: String, _ bytes: String) -> String {
        name.padding(toLength: 16, withPad: " ", startingAt: 0) + String(repeating: " ", count: max(0, 7 - count.count))
            + count + String(repeating: " ", count: max(0, 12 - bytes.count)) + bytes
    }

    /// What a state's byte total leaves out, after its row: `  (2 of unknown size, not counted)`.
    static func leftOut(_ totals: QueueStatus.Totals) -> String {
        var parts: [String] = []
        if totals.unknownSizeCount > 0 { parts.append("\(totals.unknownSizeCount) of unknown size") }
        if totals.invalidSizeCount > 0 {
            parts.append("\(totals.invalidSizeCount) of a size that is not a byte count")
        }
        return parts.isEmpty ? "" : "  (\(parts.joined(separator: ", ")): not counted)"
    }

    static func name(_ state: AttachmentState) -> String {
        switch state {
        case .queuedUpload: "to upload"
        case .queuedDownload: "to download"
        case .queuedDelete: "to delete"
        case .synced: "synced"
        case .archived: "archived"
        }
    }

    static func date(_ date: Date) -> String {
        // A format style, not an `ISO8601DateFormatter` made for every row: a thousand retries took 0.3 s.
        date.formatted(.iso8601)
    }

    /// A text on one line, at most `limit` characters (an error message, a value from the table).
    static func oneLine(_ text: String, limit: Int = 160) -> String {
        let flat = text.replacingOccurrences(of: "\n", with: " ").replacingOccurrences(of: "\r", with: " ")
        return flat.count > limit ? String(flat.prefix(limit - 1)) + "…" : flat
    }
}
