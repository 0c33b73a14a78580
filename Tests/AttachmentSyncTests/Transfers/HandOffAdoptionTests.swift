import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// A background service in memory whose first `hand` and one `running` call wait at gates the test opens,
/// so that a hand-over can finish between an adoption's reads.
final class GatedTransferService: BackgroundTransferService {
    /// Every transfer handed over, in order.
    let handed = LockedValue<[BackgroundTransfer]>([])
    /// The ids the service runs: handed over, no result (it never runs them).
    private let pending = LockedValue<Set<String>>([])
    private let holdsHand = LockedValue(true)
    let handArrived = AsyncStream.makeStream(of: Void.self)
    let handGate = AsyncStream.makeStream(of: Void.self)
    /// Whether the next `running()` waits, after taking its answer, at `runningGate`.
    let holdsRunning = LockedValue(false)
    let runningArrived = AsyncStream.makeStream(of: Void.self)
    let runningGate = AsyncStream.makeStream(of: Void.self)
    /// Yielding it makes the queue adopt.
    let wake = AsyncStream.makeStream(of: Void.self)

    func hand(_ transfer: BackgroundTransfer) async throws {
        handed.withLock { $0.append(transfer) }
        if Self.take(holdsHand) {
            handArrived.continuation.yield()
            var gate = handGate.stream.makeAsyncIterator()
            _ = await gate.next()
        }
        pending.withLock { _ = $0.insert(transfer.id) }
    }

    func running() async throws -> Set<String> {
        let answer = pending.withLock { $0 }
        if Self.take(holdsRunning) {
            runningArrived.continuation.yield()
            var gate = runningGate.stream.makeAsyncIterator()
            _ = await gate.next()
        }
        return answer
    }

    /// The flag's value, leaving it false.
    private static func take(_ flag: LockedValue<Bool>) -> Bool {
        flag.withLock { held in
            defer { held = false }
            return held
        }
    }

    func results() async throws -> [BackgroundTransferResult] { [] }
    func acknowledge(_ id: String) async throws {}
    func resultsMayHaveArrived() -> AsyncStream<Void> { wake.stream }
}

/// How adoption reads the queue's hand-off records and the service's state.
@Suite("Background hand-off adoption", .cleansUp)
struct HandOffAdoptionTests {
    /// An adoption that asked the service what it runs just before a hand-over reached it, and read the
    /// hand-off records just after that hand-over finished, took the record for one the service had lost
    /// (neither running, nor reported, nor being handed) once the recovery delay was past: the upload was
    /// handed over a second time (on Ceph: a second PUT, refused as create-only). The records are read
    /// first now, then the hand-overs in progress, then the service.
    @Test("a hand-over that finishes while an adoption reads is not taken for one the service lost")
    func handOverDuringAdoptionIsNotRecovered() async throws {
        let service = GatedTransferService()
        let remote = EncryptedBackgroundFormingTests.FormingMemory(largest: nil)
        let device = try QueueHarness(remote: remote) { configuration in
            var transfers = BackgroundTransfers(service: service)
            // No grace: a record neither running, reported nor being handed is recovered at once.
            transfers.recoveryDelay = .zero
            configuration.backgroundTransfers = transfers
        }
        let events = device.queue.events
        try await device.queue.startSync()
        let photo = try await device.queue.saveFile(data: testBytes(1_000), mediaType: nil, fileExtension: "jpg")
        // The hand-over is recorded and reaches the service, which holds it.
        try await withDeadline("the hand-over to reach the service") {
            for await _ in service.handArrived.stream { return }
        }

        // An adoption asks what the service runs (not the held upload yet) and waits there.
        service.holdsRunning.withLock { $0 = true }
        service.wake.continuation.yield()
        try await withDeadline("the adoption to ask the service") {
            for await _ in service.runningArrived.stream { return }
        }

        // The hand-over finishes: the service runs the upload, the queue no longer counts it as being handed.
        service.handGate.continuation.yield()
        try await withDeadline("the hand-over to finish") {
            for await event in events {
                if case .handedOff(photo.id) = event { return }
            }
        }
        service.runningGate.continuation.yield()
        await device.queue.adoptHandOffs()
        try await device.queue.syncNow()

        #expect(service.handed.withLock { $0.map(\.request.url.lastPathComponent) } == [photo.filename])
        let status = try await withDeadline("the status") {
            for await status in device.queue.status { return status }
            throw HarnessError("the status stream ended")
        }
        #expect(status.handedOff[.queuedUpload]?.count == 1, "one hand-off on record")
        #expect(await remote.memory.uploadCount == 0, "nothing was uploaded in the process")
    }
}
