import AttachmentSync
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

// How an upload bandwidth cap (`HTTPFileBody.throttle`) holds a URLSession upload to its rate, chunk by
// chunk, on each platform.

#if canImport(Darwin)
    /// Apple platforms: the body is handed to `URLSession` whole (from memory or a file), and every chunk
    /// `didSendBodyData` reports is paid for on the throttle; while the debt is more than a burst, the task is
    /// suspended ("a task, while suspended, produces no network traffic", `URLSessionTask.suspend()`), and it is
    /// resumed once paid. What the socket had already taken when the task was suspended goes at network speed;
    /// over the transfer the rate holds.
    final class URLSessionUploadPacer: Sendable {
        private struct State {
            var owed = 0
            var paying = false
            var suspended = false
            var stopped = false
        }

        let throttle: BandwidthThrottle
        private let state = LockedValue(State())

        init(throttle: BandwidthThrottle) {
            self.throttle = throttle
        }

        /// `count` more bytes went (on the delegate queue).
        func sent(_ count: Int, task: URLSessionTask?) {
            let task = UncheckedTask(task: task)
            let (startPaying, suspend) = state.withLock { state -> (Bool, Bool) in
                guard !state.stopped else { return (false, false) }
                state.owed += count
                let suspend = !state.suspended && state.owed > Int(throttle.burstBytes)
                if suspend { state.suspended = true }
                defer { state.paying = true }
                return (!state.paying, suspend)
            }
            if suspend { task.task?.suspend() }
            guard startPaying else { return }
            Task {
                // Each turn pays what is owed; the loop ends when nothing is (or the request ended).
                while true {
                    let owed = state.withLock { state -> Int in
                        defer { state.owed = 0 }
                        if state.owed == 0 || state.stopped { state.paying = false }
                        return state.stopped ? 0 : state.owed
                    }
                    guard owed > 0 else { break }
                    try? await throttle.take(owed)
                }
                let resume = state.withLock { state -> Bool in
                    defer { state.suspended = false }
                    return state.suspended && !state.stopped
                }
                if resume { task.task?.resume() }
            }
        }

        func stop() {
            state.withLock { $0.stopped = true }
        }
    }

    /// Carries the task into the paying `Task`. `@unchecked Sendable` whether or not the SDK at hand marks
    /// `URLSessionTask` `Sendable` (no build here sees Apple's SDK): the box only reads its immutable
    /// reference, and the only calls made through it, `suspend()` and `resume()`, may be made from any thread
    /// (`URLSession` and its tasks are thread-safe by Apple's documentation).
    private struct UncheckedTask: @unchecked Sendable {
        let task: URLSessionTask?
    }
#else
    /// Linux: no way to hold a URLSession upload to a rate was found, so each chunk `didSendBodyData`
    /// reports is paid for on the throttle after it went: one upload goes at network speed, and the transfers
    /// sharing the throttle afterwards wait for what it took (the queue's average rate holds, not each
    /// upload's). Use the AsyncHTTPClient engine on Linux where a strict cap matters.
    ///
    /// Why not pace the upload itself: `suspend()` takes the transfer's curl handle out of the session's multi
    /// handle and `resume()` starts the request over. A body stream whose `read` blocks until the throttle
    /// allows stalls every URLSession of the process: swift-corelibs-foundation reads a body stream on the
    /// session's work queue (`_BodyStreamSource.getNextChunk`, BodySource.swift), the work queues of all
    /// sessions are served one at a time (seen here: a blocked `read` held other sessions'
    /// `uploadTask(with:from:)` and `invalidateAndCancel()` in `DispatchQueue.sync`, on both threads of the
    /// cooperative pool, so the throttle's own sleep never ran), and a stream cannot say "not yet"
    /// (`hasBytesAvailable == false` ends the body). It also sends a stream with `Transfer-Encoding: chunked`
    /// and `Expect: 100-continue`, whatever the request's `Content-Length`.
    final class URLSessionUploadPacer: Sendable {
        let throttle: BandwidthThrottle

        init(throttle: BandwidthThrottle) {
            self.throttle = throttle
        }

        /// `count` more bytes went (on the delegate queue).
        func sent(_ count: Int, task: URLSessionTask?) {
            let throttle = throttle
            Task { try? await throttle.take(count) }
        }

        func stop() {}
    }
#endif
