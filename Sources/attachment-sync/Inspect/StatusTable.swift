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
            lines.append(row(Self.name(state), "\(totals?.count ?? 0)", DemoReport.bytes(Int(totals?.bytes ?? 0))))
        }
        let cache = status.cache
        lines.append("")
        lines.append(
            "on this device: \(DemoReport.bytes(Int(cache.usedBytes)))"
                + (cache.budget.map { " of a \(DemoReport.bytes(Int($0))) budget" } ?? ""))
        lines.append(
            "  evictable \(DemoReport.bytes(Int(cache.evictableBytes))), pinned \(DemoReport.bytes(Int(cache.pinnedBytes))), "
                + "never uploaded \(DemoReport.bytes(Int(cache.notUploadedBytes))), downloaded or queued "
                + "\(DemoReport.bytes(Int(cache.keptBytes)))")
        if cache.cannotMeetBudget {
            lines.append("  the budget cannot be met: what may not be evicted is more than that")
        } else if let budget = cache.budget, cache.usedBytes > budget {
            lines.append("  over the budget until the queue's next pass evicts")
        }
        if status.localOnly.count > 0 {
            lines.append(
                "only on this device: \(status.localOnly.count) attachment\(status.localOnly.count == 1 ? "" : "s"), "
                    + "\(DemoReport.bytes(Int(status.localOnly.bytes))) never uploaded")
        }
        if !status.waitingForRetry.isEmpty {
            lines.append("")
            lines.append("waiting for a retry (\(status.waitingForRetry.count)):")
            for retry in status.waitingForRetry {
                let what =
                    retry.awaitingUpload > 0
                    ? "not uploaded yet by the device that saved it (asked \(retry.awaitingUpload)×)"
                    : "attempt \(retry.attempts)"
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
                let size = DemoReport.bytes(Int(entry.size ?? 0))
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
        ISO8601DateFormatter().string(from: date)
    }

    /// An error message on one line, at most 160 characters.
    static func oneLine(_ text: String) -> String {
        let flat = text.replacingOccurrences(of: "\n", with: " ")
        return flat.count > 160 ? String(flat.prefix(159)) + "…" : flat
    }
}
