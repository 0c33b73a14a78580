import AttachmentSync
import Crypto
import Foundation

/// The P16 child process (`attachment-sync-bench __p16-child <mode> <folder> <bytes> <count>`): runs one side
/// of P16 in a fresh process, so that its peaks are its own, and prints them on one line.
///
/// Both sides write `count` files of `bytes` distinct bytes (1 MiB at a time, hashing them as they go), save
/// them with `saveFile(fileURL:…, moveFile: true)` while sync is off, then time one `syncNow()` of a queue
/// with `maxConcurrentTransfers` `count`, whose remote implements only the seed's three `Data` methods and
/// hashes every byte it is given; no upload hashes before all `count` are in the adapter at once, so each
/// side holds `count` files' worth of `Data` together. Checked: every record synced, and the remote got
/// each file's exact bytes (its SHA-256).
/// - `project`: the adapter has the library's default `uploadFile(fileURL:…)`.
/// - `baseline`: the adapter's `uploadFile(fileURL:…)` is the former default, `Data(contentsOf:)`.
enum MappedUploadsChild {
    /// The command-line word that selects the child.
    static let command = "__p16-child"

    /// What the child prints: `P16-RESULT hwm=<bytes> anon=<bytes> file=<bytes> seconds=<s> reset=<0|1>`.
    static let resultPrefix = "P16-RESULT"

    /// Runs the child with the arguments after ``command``; returns the process's exit status.
    static func main(_ arguments: [String]) async -> Int32 {
        guard arguments.count == 4, ["project", "baseline"].contains(arguments[0]), let size = Int64(arguments[2]),
            size > 0, let count = Int(arguments[3]), count > 0
        else {
            printError("usage: attachment-sync-bench \(command) project|baseline <folder> <bytes> <count>")
            return 2
        }
        let folder = WorkFolder(existing: URL(fileURLWithPath: arguments[1], isDirectory: true))
        do {
            print(try await run(reading: arguments[0] == "baseline", in: folder, size: size, count: count))
            return 0
        } catch {
            printError("P16 \(arguments[0]) failed: \(error)")
            return 1
        }
    }

    /// Runs one side and returns its result line.
    private static func run(reading: Bool, in folder: WorkFolder, size: Int64, count: Int) async throws -> String {
        guard Memory.currentAnonymousBytes() != nil else {
            throw BenchmarkFailure("P16 reads RssAnon from /proc/self/status, which only Linux has")
        }
        var expected: [String: String] = [:]
        var sources: [URL] = []
        for index in 0..<count {
            let url = folder.file("source-\(index).bin")
            let sha256 = try writeFile(at: url, size: size, seed: index)
            sources.append(url)
            expected[url.path] = sha256
        }
        let core = HashingCore(expected: count)
        let remote: any RemoteStorageAdapter = reading ? ReadingHashingRemote(core: core) : HashingRemote(core: core)
        return try await withDevice(in: folder, remote: remote, maxConcurrentTransfers: count) { device in
            var hashByFilename: [String: String] = [:]
            for source in sources {
                let attachment = try await device.queue.saveFile(
                    fileURL: source, mediaType: "application/octet-stream", fileExtension: "bin", moveFile: true)
                hashByFilename[attachment.filename] = expected[source.path]
            }
            let reset = Memory.resetPeakResidentBytes()
            let sampler = MemorySampler()
            let (_, elapsed) = try await measure { try await device.queue.syncNow() }
            let (anonymous, fileBacked) = sampler.stop()
            guard let peak = Memory.peakResidentBytes() else {
                throw BenchmarkFailure("cannot read the peak resident set size")
            }
            guard await core.gate.wasFull else {
                throw BenchmarkFailure("the \(count) uploads were never in the adapter at once")
            }
            let synced = try await device.count(in: .synced)
            guard synced == count else { throw BenchmarkFailure("\(synced) of \(count) uploads synced") }
            let received = core.hashes.withLock { $0 }
            guard received == hashByFilename else {
                throw BenchmarkFailure("the remote got other bytes than the files held")
            }
            return [
                resultPrefix, "hwm=\(peak)", "anon=\(anonymous)", "file=\(fileBacked)",
                String(format: "seconds=%.3f", elapsed.seconds), "reset=\(reset ? 1 : 0)",
            ].joined(separator: " ")
        }
    }

    /// Writes `size` bytes of content distinct for `seed`, 1 MiB at a time, and returns their SHA-256.
    private static func writeFile(at url: URL, size: Int64, seed: Int) throws -> String {
        guard FileManager.default.createFile(atPath: url.path, contents: nil) else {
            throw BenchmarkFailure("cannot create \(url.path)")
        }
        let handle = try FileHandle(forWritingTo: url)
        defer { try? handle.close() }
        var hasher = SHA256()
        var written: Int64 = 0
        var chunk = 0
        while written < size {
            let bytes = content(
                index: 9_000_000 + seed * 100_000 + chunk, size: Int(min(Int64(BigFile.chunkSize), size - written)))
            try handle.write(contentsOf: bytes)
            hasher.update(data: bytes)
            written += Int64(bytes.count)
            chunk += 1
        }
        return hasher.finalize().map { String(format: "%02x", $0) }.joined()
    }
}

/// What both P16 adapters do with an upload: wait until all are in the adapter at once, then hash every
/// byte (which touches every page of the `Data`) and keep the SHA-256 by filename.
final class HashingCore: Sendable {
    let gate: Gate
    let hashes = LockedValue<[String: String]>([:])

    init(expected: Int) {
        gate = Gate(expected: expected)
    }

    func take(_ data: Data, filename: String) async {
        await gate.arrive()
        var hasher = SHA256()
        hasher.update(data: data)
        let hex = hasher.finalize().map { String(format: "%02x", $0) }.joined()
        hashes.withLock { $0[filename] = hex }
    }

    /// Lets callers through once `expected` have arrived, or after two minutes whatever the count (then
    /// ``wasFull`` stays `false`).
    actor Gate {
        let expected: Int
        private var arrived = 0
        private var waiting: [CheckedContinuation<Void, Never>] = []
        private(set) var wasFull = false
        private var isOpen = false

        init(expected: Int) {
            self.expected = expected
        }

        func arrive() async {
            arrived += 1
            if arrived >= expected { wasFull = true }
            if arrived == 1 {
                Task {
                    try? await Task.sleep(for: .seconds(120))
                    self.open()
                }
            }
            if wasFull || isOpen {
                open()
                return
            }
            await withCheckedContinuation { waiting.append($0) }
        }

        private func open() {
            isOpen = true
            for continuation in waiting { continuation.resume() }
            waiting = []
        }
    }
}

/// An adapter with the seed's three `Data` methods only: uploads go through the library's default
/// `uploadFile(fileURL:…)`.
final class HashingRemote: RemoteStorageAdapter {
    let core: HashingCore

    init(core: HashingCore) {
        self.core = core
    }

    func uploadFile(data: Data, attachment: Attachment) async throws {
        await core.take(data, filename: attachment.filename)
    }

    func downloadFile(attachment: Attachment) async throws -> Data {
        throw BenchmarkFailure("P16 only uploads")
    }

    func deleteFile(attachment: Attachment) async throws {}
}

/// The same adapter with the library's former default `uploadFile(fileURL:…)`: the whole file read into
/// memory, then `uploadFile(data:)`.
final class ReadingHashingRemote: RemoteStorageAdapter {
    let core: HashingCore

    init(core: HashingCore) {
        self.core = core
    }

    func uploadFile(data: Data, attachment: Attachment) async throws {
        await core.take(data, filename: attachment.filename)
    }

    func uploadFile(fileURL: URL, attachment: Attachment, progress: @escaping TransferProgressHandler) async throws {
        let data = try Data(contentsOf: fileURL)
        progress(TransferProgress(completedBytes: 0, totalBytes: Int64(data.count)))
        try await uploadFile(data: data, attachment: attachment)
        progress(TransferProgress(completedBytes: Int64(data.count), totalBytes: Int64(data.count)))
    }

    func downloadFile(attachment: Attachment) async throws -> Data {
        throw BenchmarkFailure("P16 only uploads")
    }

    func deleteFile(attachment: Attachment) async throws {}
}

/// Samples this process's anonymous and file-backed resident memory every 2 ms on a thread of its own (the
/// cooperative threads are busy hashing) and keeps the peaks, until ``stop()``.
final class MemorySampler: Sendable {
    private let state = LockedValue(State())
    private let finished = DispatchSemaphore(value: 0)

    private struct State: Sendable {
        var stop = false
        var anonymous: Int64 = 0
        var fileBacked: Int64 = 0
    }

    init() {
        let state = state
        let finished = finished
        Thread {
            while true {
                let anonymous = Memory.currentAnonymousBytes() ?? 0
                let fileBacked = Memory.currentFileBackedBytes() ?? 0
                let stop = state.withLock { value in
                    value.anonymous = max(value.anonymous, anonymous)
                    value.fileBacked = max(value.fileBacked, fileBacked)
                    return value.stop
                }
                if stop { break }
                usleep(2_000)
            }
            finished.signal()
        }.start()
    }

    /// Stops sampling and returns the peaks (anonymous, file-backed) in bytes.
    func stop() -> (Int64, Int64) {
        state.withLock { $0.stop = true }
        finished.wait()
        return state.withLock { ($0.anonymous, $0.fileBacked) }
    }
}
