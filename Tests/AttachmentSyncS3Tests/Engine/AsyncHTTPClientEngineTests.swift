import AttachmentSync
import AttachmentSyncHTTP
import Foundation
import NIOCore
import NIOPosix
import TestSupport
import Testing

@testable import AttachmentSyncS3

@Suite("AsyncHTTPClient engine: streamed file bodies")
struct AsyncHTTPClientEngineTests {
    /// A file of `chunks` body chunks (256 KiB each) of varied bytes.
    private static func makeFile(in directory: URL, chunks: Int) throws -> (URL, Data) {
        let file = directory.appendingPathComponent("body.bin")
        var bytes = Data(count: FileChunks.chunkSize * chunks)
        bytes.withUnsafeMutableBytes { raw in
            for index in raw.indices { raw[index] = UInt8(truncatingIfNeeded: index &* 131 &+ index >> 12) }
        }
        try bytes.write(to: file)
        return (file, bytes)
    }

    @Test("a file body reads no more than a few chunks ahead of an event loop that does not run, and all of it")
    func readAheadWaitsForTheEventLoop() async throws {
        try await withTemporaryDirectory { directory in
            let (file, bytes) = try Self.makeFile(in: directory, chunks: ByteBufferChunks.readAhead * 3)
            let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
            let loop = group.next()
            // The event loop stays busy (as when its thread is not scheduled) until the test lets it go.
            let gate = DispatchSemaphore(value: 0)
            loop.execute { gate.wait() }
            let released = LockedValue(false)
            let (aheadReached, reachedAhead) = AsyncStream.makeStream(of: Void.self)
            let (allRead, readAll) = AsyncStream.makeStream(of: Void.self)
            let body = HTTPFileBody(
                url: file, offset: 0, length: Int64(bytes.count), files: SystemFileOperations(), throttle: nil
            ) { _ in }
            let reader = Task {
                var iterator = ByteBufferChunks(base: FileChunks(body), loops: [loop]).makeAsyncIterator()
                var read = Data()
                var beforeRelease = 0
                while let buffer = try await iterator.next() {
                    if !released.withLock({ $0 }) { beforeRelease += 1 }
                    read.append(contentsOf: buffer.readableBytesView)
                    if beforeRelease == ByteBufferChunks.readAhead { reachedAhead.yield() }
                }
                reachedAhead.finish()
                readAll.yield()
                return (read, beforeRelease)
            }
            // The reader gets its first chunks, then must wait for the event loop. A second is ample for
            // a reader that does not wait to read the rest (3 MiB); the check below does not depend on it.
            for await _ in aheadReached { break }
            let finishedWhileBlocked = await withTaskGroup(of: Bool.self) { group in
                group.addTask {
                    for await _ in allRead { return true }
                    return false
                }
                group.addTask {
                    try? await Task.sleep(for: .seconds(1))
                    return false
                }
                let first = await group.next() ?? false
                group.cancelAll()
                return first
            }
            released.withLock { $0 = true }
            gate.signal()
            let (read, beforeRelease) = try await reader.value
            try await group.shutdownGracefully()
            #expect(!finishedWhileBlocked)
            #expect(beforeRelease == ByteBufferChunks.readAhead)
            #expect(read == bytes)
        }
    }

    @Test("a file body that ends before its length is an error naming the file, not a short upload")
    func shortFileFails() async throws {
        try await withTemporaryDirectory { directory in
            let (file, bytes) = try Self.makeFile(in: directory, chunks: 2)
            let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
            let body = HTTPFileBody(
                url: file, offset: 100, length: Int64(bytes.count), files: SystemFileOperations(), throttle: nil
            ) { _ in }
            var iterator = ByteBufferChunks(base: FileChunks(body), loops: [group.next()]).makeAsyncIterator()
            var read = Data()
            let error = await #expect(throws: AttachmentError.self) {
                while let buffer = try await iterator.next() { read.append(contentsOf: buffer.readableBytesView) }
            }
            try await group.shutdownGracefully()
            #expect(error?.code == .fileSystem)
            #expect(error?.path == file.path)
            #expect(read == bytes.dropFirst(100))
        }
    }
}
