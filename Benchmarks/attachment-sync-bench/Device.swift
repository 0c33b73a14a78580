import AttachmentSync
import Foundation

/// One app instance for a scenario: a real SQLite file with the seed's checklist schema, a real
/// attachments folder, and a queue over them.
struct Device: Sendable {
    /// The database (a file in the scenario's folder).
    let db: LocalDatabase
    /// The queue under test.
    let queue: AttachmentQueue
    /// The attachments folder.
    let attachmentsDirectory: URL

    /// The seed's schema: checklists with a photo each, and the attachments table.
    static let schema = Schema(tables: [
        Table(name: "checklists", columns: [.text("description"), .integer("completed"), .text("photo_id")]),
        createAttachmentTable(name: "attachments"),
    ])

    /// The settings every scenario starts from: no periodic pass (`syncInterval` zero, so a timer never
    /// lands in a measurement) and a 10 ms throttle (the default, 1 s, would dominate the figures).
    static func baseConfiguration(attachmentsDirectory: String) -> AttachmentQueue.Configuration {
        var configuration = AttachmentQueue.Configuration(attachmentsDirectory: attachmentsDirectory)
        configuration.syncInterval = .zero
        configuration.syncThrottleDuration = .milliseconds(10)
        return configuration
    }

    /// Opens `app.sqlite` and `attachments/` in `folder` and makes a queue over them.
    ///
    /// - Parameters:
    ///   - folder: Where the database and the attachments go.
    ///   - remote: The remote storage.
    ///   - watchFileExtension: When given, the queue follows the checklists' photos (named
    ///     `<photo_id>.<ext>`), as the seed docs show; when `nil` it follows nothing, so uploaded files stay
    ///     synced.
    ///   - maxConcurrentTransfers: The queue's bound; `nil` keeps the default (4).
    ///   - archivedCacheLimit: Archived files kept; `nil` keeps the default (100).
    ///   - emissions: When given with `watchFileExtension`, each emission of the watch is noted in it (the
    ///     moment the app's query had been run and mapped) before the queue gets it.
    ///   - configure: Changes the rest of the configuration.
    init(
        in folder: WorkFolder,
        remote: any RemoteStorageAdapter,
        watchFileExtension: String? = nil,
        maxConcurrentTransfers: Int? = nil,
        archivedCacheLimit: Int64? = nil,
        emissions: EmissionLog? = nil,
        configure: (inout AttachmentQueue.Configuration) -> Void = { _ in }
    ) throws {
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: Self.schema)
        let attachmentsDirectory = folder.file("attachments")
        var configuration = Self.baseConfiguration(attachmentsDirectory: attachmentsDirectory.path)
        if let maxConcurrentTransfers { configuration.maxConcurrentTransfers = maxConcurrentTransfers }
        if let archivedCacheLimit { configuration.archivedCacheLimit = archivedCacheLimit }
        configure(&configuration)
        var watch: (@Sendable () throws -> AsyncThrowingStream<[WatchedAttachmentItem], any Error>)?
        if let ext = watchFileExtension {
            watch = {
                let stream = try db.watch(
                    options: WatchOptions(
                        sql: "SELECT photo_id FROM checklists WHERE photo_id IS NOT NULL",
                        parameters: [],
                        mapper: { cursor in
                            try WatchedAttachmentItem(id: cursor.getString(name: "photo_id"), fileExtension: ext)
                        }
                    ))
                guard let emissions else { return stream }
                return emissions.relay(stream)
            }
        }
        self.db = db
        self.attachmentsDirectory = attachmentsDirectory
        self.queue = AttachmentQueue(
            db: db, remoteStorage: remote, configuration: configuration, watchAttachments: watch)
    }

    /// Closes the queue, then the database.
    func close() async {
        await queue.close()
        try? await db.close()
    }

    /// How many records are in `state`.
    func count(in state: AttachmentState) async throws -> Int {
        try await db.get(sql: "SELECT count(*) AS n FROM attachments WHERE state = ?", parameters: [state.rawValue]) {
            try $0.getInt(name: "n")
        }
    }

    /// Saves each of `files` (`.bin`, with sync on) and waits until all are synced; returns their ids, in
    /// order, and the time from the first save until the last is synced.
    func saveUntilSynced(_ files: [Data]) async throws -> (ids: [String], elapsed: Duration) {
        let (ids, elapsed) = try await measure {
            var ids: [String] = []
            for data in files {
                let attachment = try await queue.saveFile(
                    data: data, mediaType: "application/octet-stream", fileExtension: "bin")
                ids.append(attachment.id)
            }
            try await waitForCount(files.count, in: .synced, seconds: 300)
            return ids
        }
        return (ids, elapsed)
    }

    /// Waits, through a watch of the attachments table (no polling), until `count` records are in
    /// `state` (with `orMore`, at least `count`: emissions are coalesced, so a count that keeps growing
    /// may skip the exact figure). Throws a ``BenchmarkFailure`` naming what is still missing after
    /// `seconds`.
    func waitForCount(_ count: Int, orMore: Bool = false, in state: AttachmentState, seconds: Double) async throws {
        let counts = try db.watch(
            sql: "SELECT count(*) AS n FROM attachments WHERE state = ?", parameters: [state.rawValue]
        ) { try $0.getInt(name: "n") }
        let reached = try await withDeadline(seconds: seconds) {
            try await counts.first(where: { orMore ? ($0.first ?? 0) >= count : $0 == [count] }) != nil
        }
        guard reached == true else {
            let seen = (try? await self.count(in: state)) ?? -1
            throw BenchmarkFailure("expected \(count) attachments \(state) within \(seconds) s, found \(seen)")
        }
    }

    /// Waits, through a watch, until the attachment's record is in `state` (`nil`: until it is gone).
    func waitForState(_ id: String, _ state: AttachmentState?, seconds: Double) async throws {
        let states = try db.watch(sql: "SELECT state FROM attachments WHERE id = ?", parameters: [id]) {
            try $0.getInt(name: "state")
        }
        let expected = state.map { [$0.rawValue] } ?? []
        let reached = try await withDeadline(seconds: seconds) {
            try await states.first(where: { $0 == expected }) != nil
        }
        guard reached == true else {
            throw BenchmarkFailure(
                "attachment \(id) did not reach \(state.map { "\($0)" } ?? "deletion") within \(seconds) s")
        }
    }
}

/// When each emission of a watch came, for a scenario that times what follows an emission.
actor EmissionLog {
    /// The moment of the last emission, and its item count.
    private(set) var last: (instant: ContinuousClock.Instant, count: Int)?

    /// A stream with `upstream`'s emissions, each noted here as it comes before it is passed on.
    nonisolated func relay<Element: Sendable>(
        _ upstream: AsyncThrowingStream<[Element], any Error>
    ) -> AsyncThrowingStream<[Element], any Error> {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: [Element].self)
        let task = Task {
            do {
                for try await items in upstream {
                    await note(ContinuousClock.now, count: items.count)
                    continuation.yield(items)
                }
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    private func note(_ instant: ContinuousClock.Instant, count: Int) {
        last = (instant, count)
    }
}

/// Runs `body`, giving up after `seconds`: returns `nil` when time ran out (and cancels `body`).
func withDeadline<T: Sendable>(
    seconds: Double,
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T? {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))
            return nil
        }
        defer { group.cancelAll() }
        return try await group.next() ?? nil
    }
}

/// Opens a ``Device``, runs `body` with it, and closes it afterwards, whether `body` throws or not. The
/// parameters are those of
/// ``Device/init(in:remote:watchFileExtension:maxConcurrentTransfers:archivedCacheLimit:emissions:configure:)``.
func withDevice<T: Sendable>(
    in folder: WorkFolder,
    remote: any RemoteStorageAdapter,
    watchFileExtension: String? = nil,
    maxConcurrentTransfers: Int? = nil,
    archivedCacheLimit: Int64? = nil,
    emissions: EmissionLog? = nil,
    configure: (inout AttachmentQueue.Configuration) -> Void = { _ in },
    _ body: (Device) async throws -> T
) async throws -> T {
    let device = try Device(
        in: folder, remote: remote, watchFileExtension: watchFileExtension,
        maxConcurrentTransfers: maxConcurrentTransfers, archivedCacheLimit: archivedCacheLimit, emissions: emissions,
        configure: configure)
    do {
        let result = try await body(device)
        await device.close()
        return result
    } catch {
        await device.close()
        throw error
    }
}

/// Reads a watch's emissions until one satisfies `condition`. Throws a ``BenchmarkFailure`` when the
/// watch ends first, and `CancellationError` when the task is cancelled.
func skip<Element: Sendable>(
    _ emissions: inout AsyncThrowingStream<Element, any Error>.Iterator,
    until condition: (Element) -> Bool
) async throws {
    while true {
        try Task.checkCancellation()
        guard let element = try await emissions.next() else {
            throw BenchmarkFailure("a watch ended before the expected value")
        }
        if condition(element) { return }
    }
}
