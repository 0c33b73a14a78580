import AttachmentSync
import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// How a large download is split into ranges fetched at once.
struct ParallelDownloads: Sendable, Hashable {
    /// Objects at least this large are split.
    var threshold: Int64
    /// The size of each range (the last one may be shorter).
    var partSize: Int64
    /// How many ranges are fetched at once.
    var concurrency: Int
}

/// Which ranges of a parallel download are claimed and finished, and how many bytes arrived.
private struct RangeProgress: Sendable {
    var nextPart = 1
    /// A range was answered with the whole object: no more ranges are asked for.
    var rangesIgnored = false
    var finished: Set<Int> = []
    /// Bytes of part 0 (streamed from the first response) written so far.
    var firstPartBytes: Int64 = 0
    var received: Int64 = 0

    /// The end of the bytes written without a gap from byte 0.
    func contiguousEnd(partSize: Int64, length: Int64) -> Int64 {
        guard finished.contains(0) else { return firstPartBytes }
        var part = 1
        while finished.contains(part) { part += 1 }
        return min(length, Int64(part) * partSize)
    }
}

extension HTTPTransport {
    /// Whether a whole-object response of `length` bytes should be completed by parallel ranges: it is large
    /// enough, the server accepts byte ranges, and a validator pins every range to this very object.
    static func splits(
        _ response: HTTPEngineResponse, length: Int64?, validator: ResumeValidator?, plan: ParallelDownloads?
    ) -> Bool {
        guard let plan, let length, plan.concurrency > 1, length >= plan.threshold, length > plan.partSize,
            let validator, !validator.conditions.isEmpty,
            response.headers.first(name: "accept-ranges")?.lowercased().contains("bytes") == true
        else { return false }
        return true
    }

    /// Writes a large object: the first part from the whole-object response `first` (which is then dropped),
    /// the others with ranged GETs conditional on `validator`, `plan.concurrency` at a time, each written at its
    /// offset; a task beside them hashes the file in order as the parts finish, so the digest is ready when
    /// the last byte is.
    ///
    /// On failure the file is cut to the bytes written without a gap from byte 0 and the validator is saved
    /// only then, so a later resume continues from there and never over a hole; after a crash (no validator)
    /// the download starts over. A range answered with the whole object (a server that ignores ranges) ends
    /// the split: no other range is asked for, and that answer is written whole.
    func downloadInRanges(
        _ first: HTTPEngineResponse, to destination: URL, length: Int64, validator: ResumeValidator,
        plan: ParallelDownloads, sink: (any DownloadSink)?, event: RequestEvent, attachmentId: String?,
        meter: TransferMeter,
        progress: @escaping TransferProgressHandler,
        send: @escaping DownloadRequest
    ) async throws -> DownloadedObject {
        let validatorURL = Self.resumeValidatorURL(for: destination)
        try? files.removeFile(atPath: validatorURL.path)
        let file = try PositionalFile(path: destination.path)
        let partSize = plan.partSize
        let partCount = Int((length + partSize - 1) / partSize)
        let state = LockedValue(RangeProgress())
        let digest = LockedValue<String?>(nil)
        let (finishedParts, finishing) = AsyncStream.makeStream(of: Int.self)
        let throttle = BandwidthThrottle.current
        // A wrapper following the file learns how far it is written in order; it checks the bytes itself.
        let tap = DownloadTap.current
        let hashes = tap?.skipsDigest != true && sink == nil
        progress(TransferProgress(completedBytes: 0, totalBytes: length))

        @Sendable func received(_ count: Int64, firstPart: Bool) {
            let total = state.withLock {
                $0.received += count
                if firstPart { $0.firstPartBytes += count }
                return $0.received
            }
            meter.add(count)
            // Bytes fetched twice (a server that ignores ranges) are not counted past the whole.
            progress(TransferProgress(completedBytes: min(total, length), totalBytes: length))
        }
        @Sendable func finished(_ part: Int) {
            state.withLock { _ = $0.finished.insert(part) }
            finishing.yield(part)
        }
        /// Streams `body` into the file from `start`, stopping after `count` bytes; returns the bytes written.
        @Sendable func stream(_ body: HTTPResponseBody, from start: Int64, count: Int64, firstPart: Bool)
            async throws -> Int64
        {
            var written: Int64 = 0
            for try await chunk in body {
                var bytes = chunk
                if written + Int64(bytes.count) > count {
                    guard firstPart else {
                        throw AttachmentError(
                            code: .remoteUnavailable,
                            message: "\(service) sent more than the \(count) bytes asked for at byte \(start) of "
                                + "\(String(reflecting: event.object))", attachmentId: attachmentId,
                            name: event.object)
                    }
                    bytes = bytes.prefix(Int(count - written))
                }
                try await throttle?.take(bytes.count)
                if let sink {
                    try await sink.write(bytes, at: start + written)
                } else {
                    try file.write(bytes, at: start + written)
                }
                written += Int64(bytes.count)
                if firstPart { tap?.written(upTo: start + written) }
                received(Int64(bytes.count), firstPart: firstPart)
                if written == count { break }
            }
            return written
        }

        /// Writes a whole-object body at the offsets it covers, marking each part it completes.
        @Sendable func streamWhole(_ body: HTTPResponseBody) async throws {
            var position: Int64 = 0
            var nextMark = 0
            for try await chunk in body {
                let bytes = chunk
                guard position + Int64(bytes.count) <= length else {
                    throw AttachmentError(
                        code: .integrityMismatch,
                        message: "\(service) \(event.operation) of \(String(reflecting: event.object)) sent more "
                            + "than its \(length) bytes", attachmentId: attachmentId, name: event.object)
                }
                try await throttle?.take(bytes.count)
                if let sink {
                    try await sink.write(bytes, at: position)
                } else {
                    try file.write(bytes, at: position)
                }
                position += Int64(bytes.count)
                received(Int64(bytes.count), firstPart: false)
                while nextMark < partCount, min(length, Int64(nextMark + 1) * partSize) <= position {
                    finished(nextMark)
                    nextMark += 1
                }
            }
            guard position == length else {
                throw AttachmentError(
                    code: .remoteUnavailable,
                    message: "\(service) \(event.operation) of \(String(reflecting: event.object)) ended after "
                        + "\(position) of \(length) bytes", attachmentId: attachmentId, name: event.object)
            }
        }

        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                // Part 0 comes from the response already open; leaving its body drops that connection.
                group.addTask {
                    let count = min(partSize, length)
                    let written = try await stream(first.body, from: 0, count: count, firstPart: true)
                    guard written == count else {
                        throw AttachmentError(
                            code: .remoteUnavailable,
                            message: "\(service) \(event.operation) of \(String(reflecting: event.object)) ended "
                                + "after \(written) of \(length) bytes", attachmentId: attachmentId,
                            name: event.object)
                    }
                    finished(0)
                }
                for _ in 1..<min(plan.concurrency, partCount) {
                    group.addTask {
                        while let part = state.withLock({ state -> Int? in
                            guard state.nextPart < partCount, !state.rangesIgnored else { return nil }
                            defer { state.nextPart += 1 }
                            return state.nextPart
                        }) {
                            try Task.checkCancellation()
                            let start = Int64(part) * partSize
                            let count = min(partSize, length - start)
                            let response = try await send("bytes=\(start)-\(start + count - 1)", validator.conditions) {
                                [.ok, .partialContent, .preconditionFailed].contains($0)
                            }
                            if response.status == .ok {
                                // The server ignores ranges: this answer is the whole object, so it is written
                                // whole (other parts in flight write the same bytes) and no range is asked for.
                                state.withLock { $0.rangesIgnored = true }
                                logger.debug(
                                    "the server ignores ranges; writing the whole object from one answer",
                                    metadata: ["object": "\(event.object)"])
                                guard validator.matches(response.headers),
                                    response.headers.first(name: "content-length").flatMap({ Int64($0) }) == length
                                else {
                                    throw AttachmentError(
                                        code: .remoteUnavailable,
                                        message: "\(String(reflecting: event.object)) changed on \(service) during its "
                                            + "download", attachmentId: attachmentId, name: event.object)
                                }
                                try await streamWhole(response.body)
                                return
                            }
                            guard response.status == .partialContent,
                                let range = response.headers.first(name: "content-range").flatMap(ContentRange.init),
                                range.start == start, range.end == start + count - 1, range.total == length,
                                validator.matches(response.headers)
                            else {
                                _ = try? await response.body.collect(upTo: Self.maxErrorBody)
                                throw AttachmentError(
                                    code: .remoteUnavailable,
                                    message: "\(String(reflecting: event.object)) changed on \(service) during its "
                                        + "download (a range of it answered \(response.status.code))",
                                    attachmentId: attachmentId, name: event.object)
                            }
                            let written = try await stream(response.body, from: start, count: count, firstPart: false)
                            guard written == count else {
                                throw AttachmentError(
                                    code: .remoteUnavailable,
                                    message: "\(service) \(event.operation) of \(String(reflecting: event.object)) "
                                        + "ended after \(written) of the \(count) bytes from byte \(start)",
                                    attachmentId: attachmentId, name: event.object)
                            }
                            finished(part)
                        }
                    }
                }
                // The digest, in order, as the parts finish (they are read back from the page cache).
                group.addTask {
                    var hasher = SHA256()
                    var done: Set<Int> = []
                    var next = 0
                    for await part in finishedParts {
                        done.insert(part)
                        while done.contains(next) {
                            let start = Int64(next) * partSize
                            if hashes {
                                try await files.readChunks(
                                    atPath: destination.path, offset: start, length: min(partSize, length - start)
                                ) { hasher.update(data: $0) }
                            }
                            next += 1
                            tap?.written(upTo: min(length, Int64(next) * partSize))
                        }
                        if next == partCount { break }
                    }
                    guard next == partCount, hashes else { return }
                    let hex = FileStreaming.hex(hasher.finalize())
                    digest.withLock { $0 = hex }
                }
                // Not `waitForAll()`, which waits for every task even after one failed: the first failure
                // must stop the others (leaving the closure by throwing cancels them).
                while try await group.next() != nil {}
            }
        } catch {
            finishing.finish()
            var end = state.withLock { $0.contiguousEnd(partSize: partSize, length: length) }
            // A sink that took the bytes says what the file holds for a later try.
            if let sink { end = sink.keep(upTo: end) }
            if (try? file.truncate(to: end)) != nil, end > 0 {
                validator.save(to: validatorURL, files: files)
            }
            throw HTTPErrorClassification.transportError(
                error, service: service, operation: event.operation, object: event.object, attachmentId: attachmentId)
        }
        finishing.finish()
        return DownloadedObject(
            size: length, headers: first.headers, writtenSize: length, writtenSHA256: digest.withLock { $0 })
    }
}
