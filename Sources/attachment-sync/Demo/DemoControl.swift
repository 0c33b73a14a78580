import AttachmentSync
import Dispatch
import Foundation

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Stops the demo's story early and remembers why: its deadline (`--timeout`) passed, or the user pressed
/// Ctrl-C (or the process got SIGTERM). The story runs as a task that ``stop(_:)`` cancels; the clean-up
/// after it (shutting the queues down, deleting the S3 objects, removing the working folder) does not run in
/// that task, so it is never cancelled.
final class DemoControl: Sendable {
    /// Why the story stopped early.
    enum Reason: Sendable, Equatable {
        /// The deadline passed.
        case timedOut
        /// A signal arrived (`SIGINT`, `SIGTERM`).
        case signal(Int32)
    }

    private let state = LockedValue<(reason: Reason?, task: Task<Void, any Error>?)>((nil, nil))
    /// What the story was doing when last seen, for the message when it stops early: `while A captured
    /// 37/1000 photos`, `waiting for B to download every photo; last seen: …`.
    let lastSeen = LockedValue("")

    /// Why the story stopped early, or `nil` while it has not.
    var reason: Reason? { state.withLock { $0.reason } }

    /// Stops the story (the first reason given is kept).
    func stop(_ reason: Reason) {
        let task = state.withLock { state -> Task<Void, any Error>? in
            if state.reason == nil { state.reason = reason }
            return state.task
        }
        task?.cancel()
    }

    /// Runs `body` as the task ``stop(_:)`` cancels; cancelled at once when the story was stopped already.
    func run(_ body: @escaping @Sendable () async throws -> Void) async throws {
        let task = Task { try await body() }
        let stopped = state.withLock { state in
            state.task = task
            return state.reason != nil
        }
        if stopped { task.cancel() }
        defer { state.withLock { $0.task = nil } }
        try await task.value
    }

    /// The name of a signal, for messages: `SIGINT`, `SIGTERM`.
    static func name(of signal: Int32) -> String {
        switch signal {
        case SIGINT: "SIGINT (Ctrl-C)"
        case SIGTERM: "SIGTERM"
        case SIGPIPE: "SIGPIPE (its output was closed)"
        default: "signal \(signal)"
        }
    }
}

/// Ctrl-C and SIGTERM while the demo runs: the first stops the story, so the demo cleans up (its working
/// folder, its S3 objects) and exits with 128 + the signal's number; a second one exits at once. SIGPIPE is
/// ignored meanwhile, so a closed output (`demo | head`) is a failed write the console reports, not the
/// end of the process before it cleans up.
final class DemoSignals: Sendable {
    /// The signals handled.
    static let handled = [SIGINT, SIGTERM]

    // The sources are created, resumed and cancelled on the thread that owns this value; Dispatch makes
    // their handlers safe to run on its queue. `nonisolated(unsafe)` because `DispatchSourceSignal` is not
    // marked `Sendable`: nothing reads the array after `init` but `cancel()`.
    private nonisolated(unsafe) let sources: [any DispatchSourceSignal]

    /// Handles the signals until ``cancel()``, stopping `control`.
    init(control: DemoControl) {
        let received = LockedValue(0)
        signal(SIGPIPE, SIG_IGN)
        sources = Self.handled.map { number in
            // Ignored by the default handler so Dispatch sees it instead of the process ending.
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                let count = received.withLock {
                    $0 += 1
                    return $0
                }
                if count > 1 {
                    FileHandle.standardError.write(Data("attachment-sync demo: quit without cleaning up\n".utf8))
                    exit(128 + number)
                }
                FileHandle.standardError.write(
                    Data(
                        ("attachment-sync demo: interrupted by \(DemoControl.name(of: number)); cleaning up "
                            + "(again to quit at once)\n").utf8))
                control.stop(.signal(number))
            }
            source.resume()
            return source
        }
    }

    /// Stops handling the signals: they end the process again.
    func cancel() {
        for source in sources { source.cancel() }
        for number in Self.handled + [SIGPIPE] { signal(number, SIG_DFL) }
    }
}
