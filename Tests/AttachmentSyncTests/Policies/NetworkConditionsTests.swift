import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// Network conditions: the pure decisions, and a queue over the in-memory remote driven by a manual source.
@Suite("Network conditions", .cleansUp)
struct NetworkConditionsTests {
    typealias Machine = QueueStateMachine<Int, Int>

    static func record(_ id: String, size: Int64? = nil) -> AttachmentRecord {
        AttachmentRecord(id: id, filename: "\(id).jpg", state: .queuedUpload, timestamp: 0, size: size)
    }

    @Test("requirements and policies decide by the conditions and the attachment")
    func requirementsAndPolicies() {
        #expect(NetworkRequirement.any.isMet(by: .expensive))
        #expect(!NetworkRequirement.any.isMet(by: .offline))
        #expect(!NetworkRequirement.unmetered.isMet(by: .expensive))
        #expect(!NetworkRequirement.unmetered.isMet(by: NetworkConditions(isReachable: true, isConstrained: true)))
        #expect(NetworkRequirement.unmetered.isMet(by: .unrestricted))
        let policy = NetworkPolicy.unmetered(above: 1000)
        let small = Attachment(id: "s", filename: "s.jpg", state: .queuedUpload, size: 1000)
        let big = Attachment(id: "b", filename: "b.jpg", state: .queuedUpload, size: 1001)
        let unknown = Attachment(id: "u", filename: "u.jpg", state: .queuedDownload)
        #expect(policy.requirement(small) == .any)
        #expect(policy.requirement(big) == .unmetered)
        #expect(policy.requirement(unknown) == .any)
        #expect(NetworkPolicy.unmetered(above: 1000, unknownSizeWaits: true).requirement(unknown) == .unmetered)
        #expect(NetworkConditions.offline.description == "offline")
        #expect(
            NetworkConditions(isReachable: true, isExpensive: true, isConstrained: true).description
                == "reachable, expensive, constrained")
    }

    @Test("the machine starts nothing offline, interrupts what the new conditions do not allow, and says when to pass")
    func machineFollowsTheNetwork() throws {
        var machine = Machine(maxConcurrentTransfers: 4)
        machine.syncStarted()
        let firstRead = machine.readQueued().read
        let read = try #require(firstRead)
        let outcome = machine.recordsRead(
            read, records: [Self.record("small", size: 10), Self.record("big", size: 10_000)], earliestRetry: nil,
            now: 0, requirement: { $0.size ?? 0 > 1000 ? .unmetered : .any })
        #expect(outcome.start.map(\.id) == ["small", "big"])
        machine.started("small", handle: 1)
        machine.started("big", handle: 2)

        // Metered: the big one pauses; nothing new to pass for.
        var change = machine.networkChanged(.expensive)
        #expect(change.actions.cancel == [2] && !change.regained && !change.improved)
        _ = machine.transferFinished("big", state: .queuedUpload, .cancelled)
        // A read on a metered network skips the big one and looks past records waiting for Wi-Fi.
        let meteredRead = machine.readQueued().read
        let metered = try #require(meteredRead)
        #expect(metered.limit >= TransferSlots<Int>.networkReadAllowance)
        let skipped = machine.recordsRead(
            metered, records: [Self.record("big", size: 10_000)], earliestRetry: nil, now: 0,
            requirement: { $0.size ?? 0 > 1000 ? .unmetered : .any })
        #expect(skipped.start.isEmpty)

        // Offline: everything in the background stops, and no read starts.
        change = machine.networkChanged(.offline)
        #expect(change.actions.cancel == [1])
        #expect(!change.improved)
        #expect(machine.readQueued().read == nil)
        #expect(!machine.mayStartTransfers)

        // Back, unmetered: regained, and a pass is due.
        change = machine.networkChanged(.unrestricted)
        #expect(change.actions.cancel.isEmpty && change.regained && change.improved)
        #expect(machine.mayStartTransfers)
    }

    @Test("offline, a save uploads nothing and spends no attempt; back online it goes at once")
    func offlineThenBack() async throws {
        let network = ManualNetworkConditions(.offline)
        let remote = InMemoryRemoteStorage()
        let device = try QueueHarness(remote: remote) { $0.networkConditions = network }
        try await device.queue.startSync()
        let saved = try await device.queue.saveFile(data: testBytes(100), mediaType: nil, fileExtension: "jpg")
        try await device.queue.syncNow()
        #expect(await remote.uploadCount == 0)
        let record = try #require(try await device.queue.attachment(id: saved.id))
        #expect(record.state == .queuedUpload)
        let status = try await withDeadline("a paused status") {
            await device.queue.status.first { $0.isPausedForNetwork }
        }
        #expect(status?.network == .offline)

        network.update(.unrestricted)
        try await device.waitForState(saved.id, .synced)
        #expect(await remote.file(named: saved.filename) == testBytes(100))
    }

    @Test("a download asked for while offline fails at once with remoteUnavailable")
    func onRequestDownloadOffline() async throws {
        let network = ManualNetworkConditions(.unrestricted)
        let remote = InMemoryRemoteStorage()
        let device = try QueueHarness(watch: true, remote: remote) {
            $0.networkConditions = network
            $0.downloadPolicy = .onDemand
        }
        await remote.setFile(testBytes(64), named: "p1.jpg")
        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: "p1")
        try await device.waitForRecord("p1")
        network.update(.offline)
        _ = try await withDeadline("the queue to see the network gone") {
            await device.queue.status.first { $0.isPausedForNetwork }
        }
        let error = await #expect(throws: AttachmentError.self) { try await device.queue.download(attachmentId: "p1") }
        #expect(error?.code == .remoteUnavailable)
        #expect(await remote.downloadCount == 0)
        network.update(.unrestricted)
        _ = try await withDeadline("the queue to see the network back") {
            await device.queue.status.first { !$0.isPausedForNetwork }
        }
        let fetched = try await device.queue.download(attachmentId: "p1")
        #expect(fetched.localUri != nil)
    }

    @Test("a transfer in flight when the network goes pauses without an attempt, and finishes when it returns")
    func inFlightPauses() async throws {
        let network = ManualNetworkConditions()
        let remote = InMemoryRemoteStorage()
        let device = try QueueHarness(remote: remote) { $0.networkConditions = network }
        let saved = try await device.startStuckUpload()
        network.update(.offline)
        try await withDeadline("the paused transfer to end") { await remote.waitUntilNoCallInFlight() }
        try await device.waitForColumn("attempts", of: saved.id, toBe: "0")
        #expect(try await device.queue.attachment(id: saved.id)?.state == .queuedUpload)
        await remote.release()
        network.update(.unrestricted)
        try await device.waitForState(saved.id, .synced)
    }

    @Test(
        "when the network returns, transfers that failed for it start over at once; other failures keep their backoff")
    func connectivityBackoffResets() async throws {
        let network = ManualNetworkConditions()
        let remote = InMemoryRemoteStorage()
        let device = try QueueHarness(remote: remote) {
            $0.networkConditions = network
            $0.retryBackoff = RetryBackoff(initialDelay: .seconds(600), maximumDelay: .seconds(600), jitter: false)
        }
        try await device.queue.startSync()
        // One upload fails with no answer from the remote (a connection refused), one with an overload answer.
        await remote.failNext(.upload, with: AttachmentError(code: .remoteUnavailable, message: "connection refused"))
        let unreachable = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        try await device.waitForColumn("connectivity_failure", of: unreachable.id, toBe: "1")
        try await device.waitForColumn("attempts", of: unreachable.id, toBe: "0")
        await remote.failNext(.upload, with: InMemoryRemoteStorage.overloadedError)
        let refused = try await device.queue.saveFile(data: testBytes(20), mediaType: nil, fileExtension: "jpg")
        try await device.waitForColumn("attempts", of: refused.id, toBe: "1")
        try await device.waitForColumn("connectivity_failure", of: refused.id, toBe: nil)

        // The network drops and returns: the first goes at once, not in ten minutes; the second waits.
        network.update(.offline)
        network.update(.unrestricted)
        try await device.waitForState(unreachable.id, .synced)
        try await device.queue.syncNow()
        let waiting = try #require(try await device.queue.attachment(id: refused.id))
        #expect(waiting.state == .queuedUpload)
        #expect(await remote.file(named: refused.filename) == nil)
    }

    @Test(
        "no answer at all is the network's before the source says offline: no attempt spent, nothing given up")
    func connectivityFailureBeforeTheSourceKnows() async throws {
        let network = ManualNetworkConditions()
        let remote = InMemoryRemoteStorage()
        let handler = CountingHandler()
        let device = try QueueHarness(remote: remote, errorHandler: handler) {
            $0.networkConditions = network
            $0.maxAttempts = 1
            $0.retryBackoff = RetryBackoff(initialDelay: .seconds(600), maximumDelay: .seconds(600), jitter: false)
        }
        try await device.queue.startSync()
        // The source still says reachable when the connections fail: the phone has just left Wi-Fi.
        await remote.failNext(.upload, count: 3, with: InMemoryRemoteStorage.offlineError)
        let photo = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        try await device.waitForColumn("connectivity_failure", of: photo.id, toBe: "1")
        for expected in 2...3 {
            // Each further failure grows the wait, and is still no attempt.
            try await device.queue.syncNow()
            await device.clock.advance(by: .seconds(601))
            try await device.waitForColumn("connectivity_failure", of: photo.id, toBe: "\(expected)")
        }
        let waiting = try #require(try await device.queue.attachment(id: photo.id))
        #expect(waiting.state == .queuedUpload && waiting.givenUp == nil, "maxAttempts 1 gave nothing up")
        try await device.waitForColumn("attempts", of: photo.id, toBe: "0")
        #expect(handler.calls == 0, "the error handler decides on failed tries, and these were none")
        let status = try #require(await device.queue.status.first { _ in true })
        #expect(status.waitingForNetwork.map(\.attachmentId) == [photo.id])
        #expect(status.waitingForNetwork.first?.networkFailures == 3)

        // Now the source notices, then the network returns: the upload goes at once, not in ten minutes.
        network.update(.offline)
        network.update(.unrestricted)
        try await device.waitForState(photo.id, .synced)
        #expect(await remote.file(named: photo.filename) == testBytes(10))
    }

    /// Starts syncing a queue fed by `source` whose uploads above 1,000 bytes wait for an unmetered network,
    /// saves a small file and a large one, and checks that the small one is uploaded while the large one
    /// waits (`why`); then has `report` say the network is unmetered and checks that the large one goes.
    static func largeUploadWaitsForUnmetered(
        _ source: any NetworkConditionsSource, _ why: Comment, report: (NetworkConditions) -> Void
    ) async throws -> (device: QueueHarness, remote: InMemoryRemoteStorage) {
        let remote = InMemoryRemoteStorage()
        let device = try QueueHarness(remote: remote) {
            $0.networkConditions = source
            $0.networkPolicy = .unmetered(above: 1000)
        }
        try await device.queue.startSync()
        let small = try await device.queue.saveFile(data: testBytes(500), mediaType: nil, fileExtension: "jpg")
        let big = try await device.queue.saveFile(data: testBytes(5000), mediaType: nil, fileExtension: "jpg")
        try await device.waitForState(small.id, .synced)
        try await device.queue.syncNow()
        #expect(try await device.state(of: big.id) == .queuedUpload, why)
        #expect(await remote.file(named: big.filename) == nil)
        report(.unrestricted)
        try await device.waitForState(big.id, .synced)
        return (device, remote)
    }

    @Test("until the source's first report the network is not taken as unmetered: large files wait for it")
    func nothingAssumedBeforeTheFirstReport() async throws {
        let source = SilentUntilToldSource()
        _ = try await Self.largeUploadWaitsForUnmetered(source, "perhaps cellular: not yet known") {
            source.report($0)
        }
    }

    /// A source that reports nothing until the test says what the network is (as `NWPathMonitor` takes a
    /// moment after its start). Unlike ``ManualNetworkConditions``, which reports its conditions as soon as
    /// it is asked, it lets a test see what the queue assumes before the first report.
    final class SilentUntilToldSource: NetworkConditionsSource, Sendable {
        private let stream: AsyncStream<NetworkConditions>
        private let continuation: AsyncStream<NetworkConditions>.Continuation
        init() { (stream, continuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1)) }
        func updates() -> AsyncStream<NetworkConditions> { stream }
        func report(_ conditions: NetworkConditions) { continuation.yield(conditions) }
    }

    /// An error handler that counts its calls and always retries.
    final class CountingHandler: SyncErrorHandler, Sendable {
        private let count = LockedValue(0)
        var calls: Int { count.withLock { $0 } }
        func onDownloadError(attachment: AttachmentSync.Attachment, error: any Error) async -> Bool { bump() }
        func onUploadError(attachment: AttachmentSync.Attachment, error: any Error) async -> Bool { bump() }
        func onDeleteError(attachment: AttachmentSync.Attachment, error: any Error) async -> Bool { bump() }
        private func bump() -> Bool {
            count.withLock { $0 += 1 }
            return true
        }
    }

    @Test("on a metered network large files wait (and one in flight pauses); on Wi-Fi they go")
    func unmeteredPolicy() async throws {
        let network = ManualNetworkConditions(.expensive)
        let (device, remote) = try await Self.largeUploadWaitsForUnmetered(network, "metered: it waits") {
            network.update($0)
        }

        // A large upload in flight when the network becomes metered pauses, with no attempt spent.
        await remote.hold()
        let video = try await device.queue.saveFile(data: testBytes(8000), mediaType: nil, fileExtension: "mov")
        try await withDeadline("the upload to be in flight") { await remote.waitForInFlight(count: 1) }
        network.update(.expensive)
        try await withDeadline("the paused transfer to end") { await remote.waitUntilNoCallInFlight() }
        await remote.release()
        try await device.waitForColumn("attempts", of: video.id, toBe: "0")
        #expect(try await device.queue.attachment(id: video.id)?.state == .queuedUpload)
        network.update(.unrestricted)
        try await device.waitForState(video.id, .synced)
    }
}
