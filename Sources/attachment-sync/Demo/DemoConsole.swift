import AttachmentSync
import Foundation

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Where the demo writes: standard output, unbuffered, so progress lines and the final report arrive in
/// order whether the output goes to a terminal, a pipe or a file.
///
/// On a terminal, a status line is rewritten in place (`\r`) as it changes; elsewhere only milestones are
/// written, one plain line each, so logs stay short.
final class DemoConsole: Sendable {
    /// Whether standard output is a terminal.
    let isTerminal: Bool
    /// Whether a status line is on screen without its line break yet (terminal only). Writes happen under
    /// its lock, so lines from different tasks never interleave.
    private let openStatus = LockedValue(false)
    /// Whether standard output refused a write: nothing more is written to it.
    private let outputClosed = LockedValue(false)

    /// A console for the process's standard output.
    /// Called once when standard output refuses a write (its reader went away).
    private let onOutputClosed: @Sendable () -> Void

    /// A console for the process's standard output; `onOutputClosed` is called once when it refuses a write
    /// (with `SIGPIPE` ignored: `demo | head`, say). The default does nothing.
    init(onOutputClosed: @escaping @Sendable () -> Void = {}) {
        isTerminal = isatty(STDOUT_FILENO) == 1
        self.onOutputClosed = onOutputClosed
    }

    /// Writes an empty line, then `title`: the start of a step or a report.
    func section(_ title: String) {
        line()
        line(title)
    }

    /// Writes `text` as a line of its own.
    func line(_ text: String = "") {
        openStatus.withLock { openStatus in
            var output = openStatus ? "\n" : ""
            openStatus = false
            output += text + "\n"
            write(output)
        }
    }

    /// Shows a status line: rewritten in place on a terminal; written as a plain line elsewhere only when
    /// `milestone` is true.
    func status(_ text: String, milestone: Bool) {
        openStatus.withLock { openStatus in
            if isTerminal {
                // Carriage return, then erase to the end of the line, then the new text.
                write("\r\u{1B}[K" + text)
                openStatus = true
            } else if milestone {
                write(text + "\n")
            }
        }
    }

    /// Ends the current status line, if one is open, keeping its last text on screen.
    func endStatus() {
        openStatus.withLock { openStatus in
            if openStatus { write("\n") }
            openStatus = false
        }
    }

    /// Writes `text` to standard error, after ending an open status line.
    func error(_ text: String) {
        endStatus()
        try? FileHandle.standardError.write(contentsOf: Data((text + "\n").utf8))
    }

    /// Writes to standard output; once that fails (a reader that went away, as `demo | head` does), the
    /// rest is dropped rather than crash the demo before it cleans up.
    private func write(_ text: String) {
        guard !outputClosed.withLock({ $0 }) else { return }
        do {
            try FileHandle.standardOutput.write(contentsOf: Data(text.utf8))
        } catch {
            outputClosed.withLock { $0 = true }
            onOutputClosed()
        }
    }
}
