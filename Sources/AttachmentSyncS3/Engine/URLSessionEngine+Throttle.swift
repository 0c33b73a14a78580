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

    /// `URLSessionTask` is `Sendable` on Apple platforms (it is thread-safe by its documentation); the box only
    /// carries the optional into the paying task.
    private struct UncheckedTask: Sendable {
        let task: URLSessionTask?
    }
#else
    /// Linux: the body is a stream that hands bytes to `URLSession` only as fast as the throttle allows.
    ///
    /// swift-corelibs-foundation reads a body stream on the session's work queue from libcurl's read callback,
    /// and takes `hasBytesAvailable == false` (or a `read` of 0) as the end of the body; it has no way to say
    /// "not yet" for a stream (`_BodyStreamSource.getNextChunk` in BodySource.swift). So `read` blocks until the
    /// throttle lets its chunk go. That blocks the session's work queue, hence every task of the session: a
    /// throttled upload therefore runs in a session of its own (`PreparedBody.needsOwnSession`). Suspending the
    /// task instead is not an option on Linux: `suspend()` removes the curl handle and `resume()` starts the
    /// request over.
    ///
    /// Its mutable state is used only by the thread reading the stream (the session's serial work queue); what
    /// other threads touch is in its ``ThrottleGate``.
    final class ThrottledFileStream: InputStream {
        let file: HTTPFileBody
        let throttle: BandwidthThrottle
        let gate = ThrottleGate()
        private var handle: FileHandle?
        private var position: Int64
        private var remaining: Int64
        private var status: Stream.Status = .notOpen
        private var failure: (any Error)?

        init(file: HTTPFileBody, throttle: BandwidthThrottle) {
            self.file = file
            self.throttle = throttle
            position = file.offset
            remaining = file.length
            super.init(data: Data())
        }

        override var streamStatus: Stream.Status { status }
        override var streamError: (any Error)? { failure }
        override var hasBytesAvailable: Bool { remaining > 0 && status == .open }

        override func open() {
            do {
                let opened = try file.files.openForReading(atPath: file.url.path)
                try fileSystem(path: file.url.path) { try opened.seek(toOffset: UInt64(position)) }
                handle = opened
                status = .open
            } catch {
                failure = error
                status = .error
            }
        }

        override func close() {
            try? handle?.close()
            handle = nil
            if status != .error { status = .closed }
        }

        override func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength length: Int) -> Int {
            guard status == .open, let handle else { return status == .error ? -1 : 0 }
            guard remaining > 0 else {
                status = .atEnd
                return 0
            }
            let count = Int(min(Int64(min(length, 64 * 1024)), remaining))
            do {
                try waitForThrottle(count)
                let data = try fileSystem(path: file.url.path) { try handle.read(upToCount: count) } ?? Data()
                guard !data.isEmpty else {
                    throw AttachmentError(
                        code: .fileSystem,
                        message: "\(file.url.path) ended \(remaining) bytes early while it was being uploaded",
                        path: file.url.path)
                }
                data.copyBytes(to: buffer, count: data.count)
                position += Int64(data.count)
                remaining -= Int64(data.count)
                return data.count
            } catch {
                failure = error
                status = .error
                return -1
            }
        }

        /// Blocks this thread (the session's work queue, never a Swift concurrency thread) until the throttle
        /// lets `count` bytes go; throws `CancellationError` once its gate was cancelled.
        private func waitForThrottle(_ count: Int) throws {
            let done = DispatchSemaphore(value: 0)
            let result = LockedValue<Result<Void, any Error>>(.success(()))
            let throttle = throttle
            let payment = Task {
                do { try await throttle.take(count) } catch { result.withLock { $0 = .failure(error) } }
                done.signal()
            }
            gate.install(payment)
            done.wait()
            gate.install(nil)
            try result.withLock { $0 }.get()
        }
    }

    /// Lets another thread end a ``ThrottledFileStream``'s wait for its throttle.
    final class ThrottleGate: Sendable {
        private let state = LockedValue<(cancelled: Bool, payment: Task<Void, Never>?)>((false, nil))

        /// Sets the wait in progress (cancelled at once when ``cancel()`` came first).
        func install(_ payment: Task<Void, Never>?) {
            let cancelled = state.withLock { state -> Bool in
                state.payment = payment
                return state.cancelled
            }
            if cancelled { payment?.cancel() }
        }

        /// Ends the wait in progress and any later one (the request was cancelled).
        func cancel() {
            state.withLock { state in
                state.cancelled = true
                return state.payment
            }?.cancel()
        }
    }
#endif

/// A request body stream carried to the delegate queue: created by the engine for one task and handed to
/// `URLSession` from there, used by one thread at a time.
struct BodyStream: @unchecked Sendable {
    let stream: InputStream
    #if !canImport(Darwin)
        let gate: ThrottleGate?
    #endif
}
