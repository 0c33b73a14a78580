import AttachmentSync
import AttachmentSyncTesting
import Foundation
import Testing

/// Every wait in these tests is for a condition (calls in flight, a sleeper, a task's value); none sleeps on
/// the wall clock. The time limit is a backstop for waits that return when cancelled; it cannot interrupt a
/// test stuck awaiting an unstructured task that never finishes (Swift Testing waits for the test).
///
/// Like ``ManualClockTests``, the tests run on threads of their own (``OwnThreads``), their tasks started
/// with `Task.onOwnThreads`, so that their time limits measure their own work, not the load of the run.
@Suite(.timeLimit(.minutes(1)), .onOwnThreads)
struct InMemoryRemoteStorageTests {
    /// Swift Testing has its own `Attachment`: ours needs its module name.
    private func attachment(_ filename: String, id: String? = nil) -> AttachmentSync.Attachment {
        AttachmentSync.Attachment(id: id ?? filename, filename: filename, state: .queuedUpload)
    }

    private let jpeg = Data("jpeg bytes".utf8)

    // MARK: - The adapter contract

    @Test func uploadThenDownloadReturnsTheSameBytes() async throws {
        let storage = InMemoryRemoteStorage()
        let adapter: any RemoteStorageAdapter = storage

        try await adapter.uploadFile(data: jpeg, attachment: attachment("a.jpg"))

        #expect(try await adapter.downloadFile(attachment: attachment("a.jpg")) == jpeg)
        #expect(await storage.files == ["a.jpg": jpeg])
        #expect(await storage.file(named: "a.jpg") == jpeg)
    }

    @Test func uploadingTheSameFilenameAgainOverwrites() async throws {
        let storage = InMemoryRemoteStorage()
        try await storage.uploadFile(data: Data("old".utf8), attachment: attachment("a.jpg"))

        try await storage.uploadFile(data: Data("new".utf8), attachment: attachment("a.jpg"))

        #expect(await storage.files == ["a.jpg": Data("new".utf8)])
    }

    @Test func downloadingAMissingFileThrowsRemoteNotFoundWithTheIdAndFilename() async throws {
        let storage = InMemoryRemoteStorage()

        let error = await #expect(throws: AttachmentError.self) {
            try await storage.downloadFile(attachment: attachment("missing.jpg", id: "id-1"))
        }

        let notFound = try #require(error)
        #expect(notFound.code == .remoteNotFound)
        #expect(notFound.attachmentId == "id-1")
        #expect(notFound.name == "missing.jpg")
        #expect(await storage.downloadCount == 1)
    }

    @Test func deleteRemovesTheFileAndSucceedsWhenItIsAlreadyGone() async throws {
        let storage = InMemoryRemoteStorage()
        try await storage.uploadFile(data: jpeg, attachment: attachment("a.jpg"))

        try await storage.deleteFile(attachment: attachment("a.jpg"))
        #expect(await storage.files.isEmpty)

        try await storage.deleteFile(attachment: attachment("a.jpg"))
        try await storage.deleteFile(attachment: attachment("never-existed.jpg"))
        #expect(await storage.deleteCount == 3)
    }

    @Test func waitForCallsAndNoCallInFlightResumeWhenTheCountersGetThere() async throws {
        let storage = InMemoryRemoteStorage()
        await storage.waitForCalls(.upload, count: 0)  // already there: returns at once
        let waiter = Task.onOwnThreads { await storage.waitForCalls(.upload, count: 2) }
        let deletes = Task.onOwnThreads { await storage.waitForCalls(.delete, count: 1) }
        try await storage.uploadFile(data: jpeg, attachment: attachment("a.jpg"))
        await storage.hold()
        let second = Task.onOwnThreads { try await storage.uploadFile(data: jpeg, attachment: attachment("b.jpg")) }
        await waiter.value  // resumed by the second call's start, while it is still held
        #expect(await storage.uploadCount == 2)
        #expect(await storage.inFlightCount == 1)
        let idle = Task.onOwnThreads { await storage.waitUntilNoCallInFlight() }
        await storage.release()
        try await second.value
        await idle.value
        #expect(await storage.inFlightCount == 0)
        deletes.cancel()
        await deletes.value  // a cancelled wait returns without its condition
        #expect(await storage.deleteCount == 0)
    }

    @Test func seededFilesCanBeDownloadedAndRemovedFilesCannot() async throws {
        // Given a file another device uploaded, and one it deleted
        let storage = InMemoryRemoteStorage()
        await storage.setFile(jpeg, named: "other.jpg")
        await storage.setFile(jpeg, named: "gone.jpg")
        await storage.removeFile(named: "gone.jpg")
        await storage.removeFile(named: "never-existed.jpg")

        // Then the first downloads, the second is not found, and seeding counted no call
        #expect(try await storage.downloadFile(attachment: attachment("other.jpg")) == jpeg)
        await #expect(throws: AttachmentError.self) {
            try await storage.downloadFile(attachment: attachment("gone.jpg"))
        }
        #expect(await storage.callLog.map(\.filename) == ["other.jpg", "gone.jpg"])
        #expect(await storage.uploadCount == 0)
    }

    // MARK: - Counters and log

    @Test func countersAndLogRecordEveryCallIncludingFailedOnes() async throws {
        let storage = InMemoryRemoteStorage()
        try await storage.uploadFile(data: jpeg, attachment: attachment("a.jpg"))
        _ = try await storage.downloadFile(attachment: attachment("a.jpg"))
        await #expect(throws: AttachmentError.self) {
            try await storage.downloadFile(attachment: attachment("b.jpg"))
        }
        await storage.failNext(.upload, with: InjectedFailure())
        await #expect(throws: InjectedFailure()) {
            try await storage.uploadFile(data: self.jpeg, attachment: attachment("c.jpg"))
        }
        try await storage.deleteFile(attachment: attachment("a.jpg"))

        #expect(await storage.uploadCount == 2)
        #expect(await storage.downloadCount == 2)
        #expect(await storage.deleteCount == 1)
        #expect(
            await storage.callLog == [
                .init(operation: .upload, filename: "a.jpg"),
                .init(operation: .download, filename: "a.jpg"),
                .init(operation: .download, filename: "b.jpg"),
                .init(operation: .upload, filename: "c.jpg"),
                .init(operation: .delete, filename: "a.jpg"),
            ]
        )
        #expect(await storage.inFlightCount == 0)
        #expect(await storage.maxConcurrentCalls == 1)
        #expect(await storage.callLog.first?.description == "upload a.jpg")
    }

    // MARK: - Injected failures

    @Test func failNextFailsThatManyCallsOfTheOperationThenSucceeds() async throws {
        // Given two upload failures injected, and a file to download
        let storage = InMemoryRemoteStorage()
        await storage.setFile(jpeg, named: "seeded.jpg")
        let failure = InjectedFailure("503 Service Unavailable")
        await storage.failNext(.upload, count: 2, with: failure)

        // Then the next two uploads fail without storing anything
        for _ in 1...2 {
            await #expect(throws: failure) {
                try await storage.uploadFile(data: self.jpeg, attachment: attachment("a.jpg"))
            }
        }
        #expect(await storage.file(named: "a.jpg") == nil)

        // And other operations are not affected, and the third upload succeeds
        #expect(try await storage.downloadFile(attachment: attachment("seeded.jpg")) == jpeg)
        try await storage.uploadFile(data: jpeg, attachment: attachment("a.jpg"))
        #expect(await storage.file(named: "a.jpg") == jpeg)
        #expect(await storage.uploadCount == 3)
    }

    @Test func failNextWithoutAnOperationFailsWhicheverCallsComeNext() async throws {
        let storage = InMemoryRemoteStorage()
        await storage.setFile(jpeg, named: "a.jpg")
        await storage.failNext(count: 2, with: InjectedFailure("first"))
        await storage.failNext(.delete, with: InjectedFailure("second"))

        await #expect(throws: InjectedFailure("first")) {
            try await storage.downloadFile(attachment: attachment("a.jpg"))
        }
        await #expect(throws: InjectedFailure("first")) {
            try await storage.deleteFile(attachment: attachment("a.jpg"))
        }
        await #expect(throws: InjectedFailure("second")) {
            try await storage.deleteFile(attachment: attachment("a.jpg"))
        }
        #expect(await storage.file(named: "a.jpg") == jpeg)

        try await storage.deleteFile(attachment: attachment("a.jpg"))
        #expect(await storage.files.isEmpty)
    }

    @Test func setAlwaysFailingFailsEveryCallUntilReset() async throws {
        // Given a storage that is offline
        let storage = InMemoryRemoteStorage()
        await storage.setFile(jpeg, named: "a.jpg")
        await storage.setAlwaysFailing(with: InMemoryRemoteStorage.offlineError)

        // Then every call fails, however often, and nothing changes
        for _ in 1...3 {
            let error = await #expect(throws: URLError.self) {
                try await storage.uploadFile(data: Data(), attachment: attachment("a.jpg"))
            }
            #expect(error?.code == .notConnectedToInternet)
            await #expect(throws: URLError.self) { try await storage.downloadFile(attachment: attachment("a.jpg")) }
            await #expect(throws: URLError.self) { try await storage.deleteFile(attachment: attachment("a.jpg")) }
        }
        #expect(await storage.files == ["a.jpg": jpeg])

        // When it is back online, then calls succeed
        await storage.setAlwaysFailing(with: nil)
        #expect(try await storage.downloadFile(attachment: attachment("a.jpg")) == jpeg)
        #expect(await storage.callLog.count == 10)
    }

    @Test func setAlwaysFailingOneOperationLeavesTheOthersWorking() async throws {
        let storage = InMemoryRemoteStorage()
        await storage.setAlwaysFailing(.delete, with: InjectedFailure("no deletes"))

        try await storage.uploadFile(data: jpeg, attachment: attachment("a.jpg"))
        #expect(try await storage.downloadFile(attachment: attachment("a.jpg")) == jpeg)
        for _ in 1...2 {
            await #expect(throws: InjectedFailure("no deletes")) {
                try await storage.deleteFile(attachment: attachment("a.jpg"))
            }
        }
        #expect(await storage.file(named: "a.jpg") == jpeg)

        await storage.setAlwaysFailing(.delete, with: nil)
        try await storage.deleteFile(attachment: attachment("a.jpg"))
        #expect(await storage.files.isEmpty)
    }

    // MARK: - Holding calls mid-flight

    @Test func heldCallsStayInFlightUntilReleased() async throws {
        // Given a held storage and three concurrent uploads
        let storage = InMemoryRemoteStorage()
        await storage.hold()
        let names = ["a.jpg", "b.jpg", "c.jpg"]
        let uploads = names.map { name in
            Task.onOwnThreads { try await storage.uploadFile(data: Data(name.utf8), attachment: attachment(name)) }
        }

        // When all three are in flight, then none has stored its file
        await storage.waitForInFlight(count: 3)
        #expect(await storage.inFlightCount == 3)
        #expect(await storage.maxConcurrentCalls == 3)
        #expect(await storage.isHolding)
        #expect(await storage.files.isEmpty)

        // When released, then all three finish
        await storage.release()
        for upload in uploads {
            try await upload.value
        }
        #expect(await storage.files == Dictionary(uniqueKeysWithValues: names.map { ($0, Data($0.utf8)) }))
        #expect(await storage.inFlightCount == 0)
        #expect(await storage.maxConcurrentCalls == 3)
        #expect(await storage.isHolding == false)

        // And later calls are not held
        try await storage.deleteFile(attachment: attachment("a.jpg"))
        #expect(await storage.maxConcurrentCalls == 3)
    }

    @Test func cancellingAHeldCallThrowsCancellationErrorAndStoresNothing() async throws {
        // Given an upload parked by a hold
        let storage = InMemoryRemoteStorage()
        await storage.hold()
        let upload = Task.onOwnThreads {
            try await storage.uploadFile(data: self.jpeg, attachment: attachment("a.jpg"))
        }
        await storage.waitForInFlight(count: 1)

        // When its task is cancelled
        upload.cancel()

        // Then it throws at once, stops counting as in flight, and the file is not stored
        await #expect(throws: CancellationError.self) { try await upload.value }
        #expect(await storage.inFlightCount == 0)
        #expect(await storage.file(named: "a.jpg") == nil)
        #expect(await storage.uploadCount == 1)

        // And releasing afterwards is harmless
        await storage.release()
        try await storage.uploadFile(data: jpeg, attachment: attachment("a.jpg"))
        #expect(await storage.file(named: "a.jpg") == jpeg)
    }

    @Test func aCallFromAnAlreadyCancelledTaskDoesNotPark() async {
        let storage = InMemoryRemoteStorage()
        await storage.hold()
        let upload = Task.onOwnThreads {
            withUnsafeCurrentTask { $0?.cancel() }
            try await storage.uploadFile(data: self.jpeg, attachment: attachment("a.jpg"))
        }
        await #expect(throws: CancellationError.self) { try await upload.value }
        #expect(await storage.inFlightCount == 0)
        #expect(await storage.files.isEmpty)
    }

    @Test func cancellingSomeHeldCallsLetsTheOthersFinishOnRelease() async throws {
        // Given ten held uploads
        let storage = InMemoryRemoteStorage()
        await storage.hold()
        let names = (0..<10).map { "\($0).jpg" }
        let uploads = names.map { name in
            Task.onOwnThreads { try await storage.uploadFile(data: Data(name.utf8), attachment: attachment(name)) }
        }
        await storage.waitForInFlight(count: 10)

        // When the even ones are cancelled while held, then they throw CancellationError
        for index in stride(from: 0, to: 10, by: 2) {
            uploads[index].cancel()
        }
        for index in stride(from: 0, to: 10, by: 2) {
            await #expect(throws: CancellationError.self) { try await uploads[index].value }
        }
        #expect(await storage.inFlightCount == 5)

        // When released, then the odd ones finish and only their files are stored
        await storage.release()
        for index in stride(from: 1, to: 10, by: 2) {
            try await uploads[index].value
        }
        #expect(await storage.files.keys.sorted() == ["1.jpg", "3.jpg", "5.jpg", "7.jpg", "9.jpg"])
        #expect(await storage.inFlightCount == 0)
        #expect(await storage.maxConcurrentCalls == 10)
    }

    @Test func aHeldCallThrowsItsInjectedFailureAfterRelease() async {
        let storage = InMemoryRemoteStorage()
        await storage.hold()
        await storage.failNext(.upload, with: InjectedFailure("late"))
        let upload = Task.onOwnThreads {
            try await storage.uploadFile(data: self.jpeg, attachment: attachment("a.jpg"))
        }
        await storage.waitForInFlight(count: 1)

        await storage.release()

        await #expect(throws: InjectedFailure("late")) { try await upload.value }
        #expect(await storage.files.isEmpty)
    }

    @Test func cancellingAWaitForInFlightReturnsEarly() async {
        let storage = InMemoryRemoteStorage()
        let waiter = Task.onOwnThreads { await storage.waitForInFlight(count: 3) }
        waiter.cancel()
        await waiter.value
        #expect(await storage.inFlightCount == 0)
    }

    // MARK: - Latency

    @Test func aCallCompletesOnlyOnceTheClockIsAdvancedByTheLatency() async throws {
        // Given a storage with 2 s of latency on a manual clock, and an upload under way
        let clock = ManualClock()
        let storage = InMemoryRemoteStorage(latency: .seconds(2), clock: clock)
        let upload = Task.onOwnThreads {
            try await storage.uploadFile(data: self.jpeg, attachment: attachment("a.jpg"))
        }
        await clock.waitForSleepers(count: 1)
        #expect(await storage.inFlightCount == 1)

        // When the clock moves 1 s, then the upload has not completed
        await clock.advance(by: .seconds(1))
        #expect(clock.sleeperCount == 1)
        #expect(await storage.file(named: "a.jpg") == nil)

        // When it moves another second, then the upload completes
        await clock.advance(by: .seconds(1))
        try await upload.value
        #expect(await storage.file(named: "a.jpg") == jpeg)
        #expect(await storage.inFlightCount == 0)
    }

    @Test func concurrentCallsOverlapDuringTheirLatency() async throws {
        let clock = ManualClock()
        let storage = InMemoryRemoteStorage(latency: .milliseconds(500), clock: clock)
        await storage.setFile(jpeg, named: "a.jpg")
        let downloads = (0..<4).map { _ in
            Task.onOwnThreads { try await storage.downloadFile(attachment: attachment("a.jpg")) }
        }
        await clock.waitForSleepers(count: 4)
        #expect(await storage.inFlightCount == 4)

        await clock.advance(by: .milliseconds(500))

        for download in downloads {
            #expect(try await download.value == jpeg)
        }
        #expect(await storage.maxConcurrentCalls == 4)
        #expect(await storage.inFlightCount == 0)
    }

    @Test func cancellingACallDuringItsLatencyThrowsCancellationError() async {
        let clock = ManualClock()
        let storage = InMemoryRemoteStorage(latency: .seconds(2), clock: clock)
        let upload = Task.onOwnThreads {
            try await storage.uploadFile(data: self.jpeg, attachment: attachment("a.jpg"))
        }
        await clock.waitForSleepers(count: 1)

        upload.cancel()

        await #expect(throws: CancellationError.self) { try await upload.value }
        #expect(await storage.files.isEmpty)
        #expect(await storage.inFlightCount == 0)
        #expect(clock.sleeperCount == 0)
    }

    @Test func injectedFailureDescriptionsAreReadable() {
        #expect(InjectedFailure("boom").description == "InjectedFailure: boom")
        #expect(InjectedFailure() == InjectedFailure("injected failure"))
        #expect(InMemoryRemoteStorage.Operation.allCases.map(\.description) == ["upload", "download", "delete"])
        #expect(InMemoryRemoteStorage.offlineError.code == .notConnectedToInternet)
    }
}
