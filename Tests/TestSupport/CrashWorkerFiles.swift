import Foundation

/// What the crash worker (`attachment-sync-crash-worker`, Tests/CrashWorker) and the tests that kill it
/// agree on: the bytes of each file it hands over, and how its journal reads.
///
/// The journal has one line per intent or outcome, each written with one `write` so a kill leaves whole
/// lines: `prepared N` once file N is written and before it is handed over, `saved N` after, `deleting N`
/// before a delete and `deleted N` after, and `syncing` in the worker's sync-only mode.
package enum CrashWorkerFiles {
    /// The content of file number `n`: deterministic (and 1 to 150,000 bytes), so a test knows what it must
    /// find.
    package static func content(_ n: Int) -> Data {
        var state = UInt64(n) &* 0x9E37_79B9_7F4A_7C15 &+ 1
        let size = Int(state % 150_000) + 1
        return Data(
            (0..<size).map { _ in
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                return UInt8(truncatingIfNeeded: state >> 33)
            })
    }

    /// The file numbers of the journal's lines of `event` (`prepared`, `saved`, `deleting`, `deleted`), in
    /// the order they were written.
    package static func numbers(_ event: String, inJournal journal: String) -> [Int] {
        journal.split(separator: "\n").compactMap { line in
            let parts = line.split(separator: " ")
            return parts.count == 2 && parts[0] == event ? Int(parts[1]) : nil
        }
    }

    /// The journal at `path`, or an empty one when there is none yet.
    package static func journal(at path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }
}
