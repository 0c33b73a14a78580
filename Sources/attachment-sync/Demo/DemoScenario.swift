import AttachmentSync
import Foundation
import Logging

/// The demo's story, step by step: device A completes an inspection checklist with a photo per item,
/// device B receives the rows and downloads the photos, A deletes one photo and B archives its copy.
///
/// Row sync between the devices is played by the scenario itself (it copies rows from A's database to
/// B's); everything about files is the library's job, and the scenario only watches it happen, polling
/// the queues' records until each step has converged or the deadline has passed.
struct DemoScenario: Sendable {
    /// How many checklist items (and photos) device A creates.
    let count: Int
    /// Whether device B fetches photos only on request (`--on-demand`).
    let onDemand: Bool
    /// The time the whole scenario may take.
    let timeout: Duration
    /// The demo's working folder.
    let root: URL
    /// The remote storage both devices share: a folder in ``root``, or a bucket with `--s3`.
    let remote: any DemoRemote
    /// Whether the remote's objects stay after the demo (`--keep`).
    let keep: Bool
    /// Where progress and results are written.
    let console: DemoConsole
    /// Where the library logs, or `nil` to keep it quiet.
    let logger: Logger?
    /// Both queues' caps on bytes per second (`--bwlimit`), or `nil` for none.
    var bandwidthLimit: BandwidthLimit? = nil
    /// Whether B's network goes down while the rows reach it (`--outage`).
    var outage = false
    /// Stops the story at the deadline or on Ctrl-C, and says why.
    var control = DemoControl()
    /// B's network, which the demo takes down and brings back with `--outage`.
    let networkOfB = ManualNetworkConditions()

    /// How often the scenario looks at the queues' records while waiting.
    static let pollInterval = Duration.milliseconds(50)
    /// The queues' periodic pass interval, short so that a missed trigger costs little.
    static let syncInterval = Duration.seconds(1)
    /// The queues' throttle between passes triggered by changes.
    static let syncThrottleDuration = Duration.milliseconds(50)

    /// The things an inspector checks; item descriptions cycle through them.
    static let checks = [
        "Fire exits unobstructed",
        "Extinguisher gauge in the green",
        "Emergency lights come on",
        "Smoke detector responds to test button",
        "First-aid kit complete",
        "Electrical panel cover closed",
        "Guard rails firmly fixed",
        "Walkways free of trip hazards",
        "Ladder inspection tag current",
        "Eye-wash station flushed",
        "Gas cylinders chained upright",
        "Safety signage readable",
    ]

    /// One checklist row as it travels from A to B.
    struct ChecklistRow: Sendable {
        var id: String
        var description: String?
        var completed: Int?
        var photoId: String?
    }

    /// What one poll of a waiting step saw.
    struct Poll: Sendable {
        /// Units done so far (photos uploaded, say).
        var completed: Int
        /// Units to do.
        var total: Int
        /// The status line to show.
        var line: String
        /// Whether the step has converged.
        var isDone: Bool
        /// The bytes moved so far, for the rate shown with `--bwlimit`, or `nil` when the step moves none.
        var bytes: Int? = nil

        /// A transfer step's progress: `done` (uploaded, say) of `total` records, which `snapshot` must hold
        /// exactly when the step is over; the status line says `what` (`A  uploaded`), the count and bytes.
        static func transferred(_ done: [Attachment], of total: Int, in snapshot: DemoSnapshot, _ what: String) -> Poll
        {
            let bytes = done.reduce(0) { $0 + Int($1.size ?? 0) }
            return Poll(
                completed: done.count, total: total,
                line: "\(what) \(done.count)/\(total)  (\(DemoReport.bytes(bytes)))",
                isDone: done.count == total && snapshot.records.count == total, bytes: bytes)
        }
    }

    // MARK: - Running

    /// Runs the scenario in `root`, then stops both devices whatever happened, and removes the demo's objects
    /// from the remote unless ``keep`` is set.
    ///
    /// - Throws: ``DemoFailure`` when the remote cannot be prepared, a step does not converge before the
    ///   deadline or a copy differs from its original; the library's errors as they come.
    func run() async throws {
        var failure: (any Error)?
        var filenames: Set<String> = []
        do {
            try await remote.prepare()
            let a = try makeDevice("A")
            let b: DemoDevice
            do {
                b = try makeDevice("B")
            } catch {
                await a.shutDown()
                throw error
            }
            failure = await playAndReport(a, b)
            filenames = await Self.filenames(known: [a, b])
            await a.shutDown()
            await b.shutDown()
        } catch {
            failure = error
        }
        if let line = await remote.finish(removing: filenames, keep: keep) {
            console.line(line)
        }
        if let failure { throw failure }
    }

    /// Plays the story on the two devices and prints the final table; returns what went wrong, if anything,
    /// after printing the state the devices were left in.
    ///
    /// The story runs in a task the deadline and Ctrl-C cancel (``DemoControl``): every step, capturing the
    /// photos included, ends there.
    private func playAndReport(_ a: DemoDevice, _ b: DemoDevice) async -> (any Error)? {
        let clock = ContinuousClock()
        let started = clock.now
        let deadline = started.advanced(by: timeout)
        let control = control
        let watchdog = Task {
            try await clock.sleep(until: deadline)
            control.stop(.timedOut)
        }
        defer { watchdog.cancel() }
        describeLayout(a, b)
        control.lastSeen.withLock { $0 = "while the devices started" }
        do {
            try await a.queue.startSync()
            try await b.queue.startSync()
            try await control.run { try await play(a, b, deadline: deadline) }
            watchdog.cancel()
            try await report(a, b, failed: false)
            console.line("demo converged in \(DemoReport.seconds(clock.now - started)): \(count) photos")
            return nil
        } catch {
            console.endStatus()
            switch control.reason {
            case .signal(let number):
                // The user wants out: no report, which may download every remote copy.
                return DemoFailure("interrupted by \(DemoControl.name(of: number))")
            case .timedOut where !(error is DemoFailure):
                console.section("state when the demo stopped:")
                try? await report(a, b, failed: true)
                return DemoFailure(
                    "timed out after \(DemoReport.shortSeconds(timeout)) \(control.lastSeen.withLock { $0 })")
            default:
                console.section("state when the demo stopped:")
                try? await report(a, b, failed: true)
                return error
            }
        }
    }

    /// The file names of every attachment the devices have a record of: every object the demo may have
    /// written to the remote (a photo deleted on A is still archived on B).
    private static func filenames(known devices: [DemoDevice]) async -> Set<String> {
        var filenames: Set<String> = []
        for device in devices {
            let records = (try? await device.queue.allAttachments()) ?? []
            filenames.formUnion(records.map(\.filename))
        }
        return filenames
    }

    private func makeDevice(_ name: String) throws -> DemoDevice {
        try DemoDevice(
            name: name,
            root: root,
            remote: remote.storage,
            syncInterval: Self.syncInterval,
            syncThrottleDuration: Self.syncThrottleDuration,
            downloadPolicy: name == "B" && onDemand ? .onDemand : .eager,
            bandwidthLimit: bandwidthLimit,
            network: name == "B" && outage ? networkOfB : nil,
            logger: logger
        )
    }

    /// How many photos B fetches on request with `--on-demand`.
    var fetchedOnDemand: Int { min(3, count) }

    /// The photos B holds content for at the end: all of them, or with `--on-demand` the ones fetched and
    /// not purged.
    private func keptOnB(_ photos: [Photo]) -> [Photo] {
        guard onDemand else { return photos }
        let fetched = Array(photos.prefix(fetchedOnDemand))
        return fetched.count > 1 ? Array(fetched.dropLast()) : fetched
    }

    private func describeLayout(_ a: DemoDevice, _ b: DemoDevice) {
        console.line("AttachmentSync demo: an inspection checklist on two devices that share \(remote.kind)")
        console.line("working folder  \(root.path)")
        for device in [a, b] {
            console.line(
                "  device \(device.name)      \(device.folder.lastPathComponent)/app.sqlite, "
                    + "\(device.folder.lastPathComponent)/attachments/")
        }
        console.line("  remote        \(remote.location)")
        if let bandwidthLimit {
            console.line("  transfers     capped at \(bandwidthLimit) on each device (--bwlimit)")
        }
    }

    // MARK: - The story

    /// The two devices, the remote they share and the deadline every step must meet.
    private struct Stage: Sendable {
        let a: DemoDevice
        let b: DemoDevice
        let remote: any DemoRemote
        let deadline: ContinuousClock.Instant
    }

    /// One photo A took: the checklist item it belongs to, its attachment id and its bytes.
    private struct Photo: Sendable {
        let item: ChecklistRow
        let attachmentId: String
        let data: Data

        /// The photo's file name, locally and remotely.
        var filename: String { "\(attachmentId).jpg" }
    }

    private func play(_ a: DemoDevice, _ b: DemoDevice, deadline: ContinuousClock.Instant) async throws {
        let stage = Stage(a: a, b: b, remote: remote, deadline: deadline)
        let photos = try await captureAndUpload(stage)
        if onDemand {
            try await syncRowsOnDemand(stage, photos: photos)
        } else {
            try await syncRowsAndDownload(stage, photos: photos)
        }
        guard let deleted = photos.first else {
            throw DemoFailure("the demo has no photo to delete")
        }
        try await deleteOnA(stage, photo: deleted)
        try await archiveOnB(stage, photo: deleted)
        // The end state: every remaining photo B holds still matches everywhere.
        _ = try await compareCopies(of: Array(keptOnB(photos).dropFirst()), stage)
        try await checkFinalState(stage, filesOnB: keptOnB(photos).count)
    }

    /// Step 1, device A: the inspector ticks every item and takes a photo of it; the queue uploads them.
    private func captureAndUpload(_ stage: Stage) async throws -> [Photo] {
        let a = stage.a
        console.section("1. A completes \(count) checklist items, with a photo each")
        control.lastSeen.withLock { $0 = "while A captured 0/\(count) photos" }
        let rows = checklistRows()
        try await a.db.writeTransaction { tx in
            for row in rows {
                try tx.execute(
                    sql: "INSERT INTO checklists (id, description, completed) VALUES (?, ?, 0)",
                    arguments: [row.id, row.description]
                )
            }
        }
        let generator = DemoPhotos()
        let started = ContinuousClock.now
        var photos: [Photo] = []
        var capturedBytes = 0
        for (index, row) in rows.enumerated() {
            // The deadline covers capturing too: a thousand photos on a slow disk take a while.
            let progress = "while A captured \(index)/\(count) photos"
            control.lastSeen.withLock { $0 = progress }
            try Task.checkCancellation()
            if ContinuousClock.now >= stage.deadline {
                console.endStatus()
                throw DemoFailure("timed out after \(DemoReport.shortSeconds(timeout)) \(progress)")
            }
            let data = generator.photo(index)
            let checklistId = row.id
            let attachment = try await a.queue.saveFile(data: data, mediaType: "image/jpeg", fileExtension: "jpg") {
                tx, attachment in
                try tx.execute(
                    sql: "UPDATE checklists SET photo_id = ?, completed = 1 WHERE id = ?",
                    arguments: [attachment.id, checklistId]
                )
            }
            photos.append(Photo(item: row, attachmentId: attachment.id, data: data))
            capturedBytes += data.count
            let isLast = index + 1 == count
            let elapsed = isLast ? "  in \(DemoReport.seconds(.now - started))" : ""
            console.status(
                "A  captured \(index + 1)/\(count)  (\(DemoReport.bytes(capturedBytes)))\(elapsed)",
                milestone: isLast
            )
        }
        console.endStatus()
        try await wait("A to upload every photo", since: started, deadline: stage.deadline) {
            let snapshot = try await a.snapshot()
            return .transferred(snapshot.records(in: .synced), of: count, in: snapshot, "A  uploaded")
        }
        return photos
    }

    /// Step 2 with `--on-demand`: B receives the rows and makes a record per photo without fetching it;
    /// then it fetches the first few on request, with progress bars, and purges one of them.
    private func syncRowsOnDemand(_ stage: Stage, photos: [Photo]) async throws {
        let b = stage.b
        console.section("2. the checklist rows reach B, whose queue downloads photos only on request")
        let started = ContinuousClock.now
        try await copyRowsToB(stage)
        try await wait("B to record every photo", since: started, deadline: stage.deadline) {
            let snapshot = try await b.snapshot()
            let remoteOnly = snapshot.records(in: .synced).filter { !$0.contentAvailable && $0.isOnDemand }
            return Poll(
                completed: remoteOnly.count,
                total: count,
                line: "B  \(remoteOnly.count)/\(count) records, remote-only  (\(snapshot.files.count) files on disk)",
                isDone: remoteOnly.count == count && snapshot.records.count == count && snapshot.files.isEmpty
            )
        }
        let fetched = Array(photos.prefix(fetchedOnDemand))
        console.line("   B opens \(fetched.count) of them:")
        for photo in fetched {
            let id = photo.attachmentId
            let updates = b.queue.progress(attachmentId: id)
            let console = console
            let bar = Task {
                var last: AttachmentProgress?
                for await update in updates {
                    last = update
                    console.status(
                        "B  fetching \(id)  \(DemoReport.progressBar(update.fractionCompleted ?? 0))  "
                            + "\(DemoReport.bytes(Int(update.completedBytes)))",
                        milestone: update.status.isFinal)
                }
                return last
            }
            let attachment = try await b.queue.download(attachmentId: id)
            let final = await bar.value
            console.endStatus()
            guard let path = attachment.localUri, (try? Data(contentsOf: URL(fileURLWithPath: path))) == photo.data
            else {
                throw DemoFailure("byte check failed: B's fetched copy of \(id) differs from the photo A took")
            }
            guard final?.status.description == "finished" else {
                throw DemoFailure("the progress of \(id) ended with \(final.map { "\($0.status)" } ?? "nothing")")
            }
        }
        console.line("   bytes: the \(fetched.count) fetched photos are identical to the ones A took")
        guard fetched.count > 1, let purged = fetched.last else { return }
        let after = try await b.queue.purge(attachmentId: purged.attachmentId)
        let remoteCopyStays = try await stage.remote.exists(purged.filename)
        guard !after.contentAvailable, after.state == .synced, remoteCopyStays else {
            throw DemoFailure("purging \(purged.attachmentId) on B did not leave a remote-only record")
        }
        console.line("   B purges \(purged.attachmentId): its file is gone, its record stays, the remote copy too")
    }

    /// Copies A's checklist rows into B's database, as row sync would.
    private func copyRowsToB(_ stage: Stage) async throws {
        let rowsOfA = try await stage.a.db.getAll(
            sql: "SELECT id, description, completed, photo_id FROM checklists ORDER BY id"
        ) { cursor in
            ChecklistRow(
                id: try cursor.getString(name: "id"),
                description: try cursor.getStringOptional(name: "description"),
                completed: try cursor.getIntOptional(name: "completed"),
                photoId: try cursor.getStringOptional(name: "photo_id")
            )
        }
        try await stage.b.db.writeTransaction { tx in
            for row in rowsOfA {
                try tx.execute(
                    sql: "INSERT INTO checklists (id, description, completed, photo_id) VALUES (?, ?, ?, ?)",
                    arguments: [row.id, row.description, row.completed, row.photoId]
                )
            }
        }
    }

    /// Step 2, row sync stand-in: B receives A's checklist rows, and its queue downloads the photos they
    /// name. Then every copy is compared with the original.
    private func syncRowsAndDownload(_ stage: Stage, photos: [Photo]) async throws {
        let b = stage.b
        console.section("2. the checklist rows reach B (the demo copies them; PowerSync would in an app)")
        if outage { try await simulateOutage(stage) }
        let started = ContinuousClock.now
        if !outage { try await copyRowsToB(stage) }
        try await wait("B to download every photo", since: started, deadline: stage.deadline) {
            let snapshot = try await b.snapshot()
            let onDisk = snapshot.records(in: .synced).filter { record in
                record.localUri.map { FileManager.default.fileExists(atPath: $0) } ?? false
            }
            return .transferred(onDisk, of: count, in: snapshot, "B  downloaded")
        }
        let compared = try await compareCopies(of: photos, stage)
        console.line(
            "   bytes: \(count)/\(count) photos identical on A, remote and B (\(DemoReport.bytes(compared)) compared)")
    }

    /// With `--outage`: B's network goes down, the rows reach B (from a sync server on its local network, say),
    /// and B's queue records the downloads without trying one; then the network comes back, and the
    /// downloads start at once.
    private func simulateOutage(_ stage: Stage) async throws {
        let b = stage.b
        networkOfB.update(.offline)
        let started = ContinuousClock.now
        try await wait("B's queue to see the network down", since: started, deadline: stage.deadline) {
            let paused = await b.queue.status.first { _ in true }?.isPausedForNetwork == true
            return Poll(completed: paused ? 1 : 0, total: 1, line: "B  network down (simulated)", isDone: paused)
        }
        try await copyRowsToB(stage)
        try await wait("B to record the downloads while offline", since: started, deadline: stage.deadline) {
            let status = await b.queue.status.first { _ in true }
            let waiting = status?.count(.queuedDownload) ?? 0
            let tried = status?.waitingForRetry.count ?? 0
            return Poll(
                completed: waiting,
                total: count,
                line: "B  paused for network: \(waiting)/\(count) downloads wait, \(tried) tried",
                isDone: waiting == count && status?.isPausedForNetwork == true && tried == 0
            )
        }
        networkOfB.update(.unrestricted)
        console.line("B  network back: the downloads start at once")
    }

    /// Step 3, device A: one photo was of the wrong thing; the inspector deletes it, locally and remotely.
    private func deleteOnA(_ stage: Stage, photo: Photo) async throws {
        let a = stage.a
        let id = photo.attachmentId
        console.section("3. A deletes the photo of \"\(photo.item.description ?? photo.item.id)\" (\(id))")
        let started = ContinuousClock.now
        try await a.queue.deleteFile(attachmentId: id) { tx, _ in
            try tx.execute(sql: "UPDATE checklists SET photo_id = NULL WHERE photo_id = ?", arguments: [id])
        }
        let localFile = a.attachmentsDirectory.appendingPathComponent(photo.filename)
        try await wait("A to delete the photo locally and remotely", since: started, deadline: stage.deadline) {
            let record = try await a.queue.attachment(id: id)
            let remoteGone = try await !stage.remote.exists(photo.filename)
            let localGone = !FileManager.default.fileExists(atPath: localFile.path)
            let done = record == nil && remoteGone && localGone
            return Poll(
                completed: done ? 1 : 0,
                total: 1,
                line:
                    "A  record \(record.map { "\($0.state)" } ?? "gone"), local file \(localGone ? "gone" : "present"), "
                    + "remote file \(remoteGone ? "gone" : "present")",
                isDone: done
            )
        }
    }

    /// Step 4, row sync stand-in: B learns that the item no longer has a photo; its copy is archived and
    /// the file kept as a cache, byte for byte the photo A took.
    private func archiveOnB(_ stage: Stage, photo: Photo) async throws {
        let b = stage.b
        let id = photo.attachmentId
        console.section("4. the cleared photo_id reaches B")
        let started = ContinuousClock.now
        try await b.db.writeTransaction { tx in
            try tx.execute(sql: "UPDATE checklists SET photo_id = NULL WHERE id = ?", arguments: [photo.item.id])
        }
        try await wait("B to archive its copy of the deleted photo", since: started, deadline: stage.deadline) {
            let record = try await b.queue.attachment(id: id)
            let file = record?.localUri.flatMap { FileManager.default.fileExists(atPath: $0) ? $0 : nil }
            let archived = record?.state == .archived
            return Poll(
                completed: archived && file != nil ? 1 : 0,
                total: 1,
                line: "B  record \(record.map { "\($0.state)" } ?? "gone"), "
                    + "file \(file == nil ? "missing" : archived ? "kept as cache" : "present")",
                isDone: archived && file != nil
            )
        }
        guard let cached = try await b.queue.attachment(id: id)?.localUri,
            (try? Data(contentsOf: URL(fileURLWithPath: cached))) == photo.data
        else {
            throw DemoFailure("byte check failed: B's archived copy of \(id) differs from the photo A took")
        }
        console.line("   bytes: B's archived copy is identical to the photo A took")
    }

    // MARK: - Waiting and checking

    /// Polls `check` every ``pollInterval`` until it reports done, showing its status line and, once
    /// done, the time since `started`; fails when `deadline` passes first. The number of polls is bounded
    /// by the time left.
    private func wait(
        _ what: String,
        since started: ContinuousClock.Instant,
        deadline: ContinuousClock.Instant,
        check: () async throws -> Poll
    ) async throws {
        let clock = ContinuousClock()
        // Saturated: a timeout of any length is a long wait, never an overflow.
        let polls = max(
            1, Int(min(Int64(clamping: ((deadline - clock.now) / Self.pollInterval).rounded(.up)), 1 << 50)) + 1)
        var lastQuarter = 0
        var lastLine = ""
        for _ in 0..<polls {
            let poll = try await check()
            control.lastSeen.withLock { $0 = "waiting for \(what); last seen: \(poll.line)" }
            if poll.isDone {
                let elapsed = clock.now - started
                var rate = ""
                if bandwidthLimit != nil, let bytes = poll.bytes, elapsed > .zero {
                    let perSecond =
                        Double(bytes)
                        / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
                    rate = ", \(BandwidthLimit.rate(Int64(clamping: perSecond.rounded())))"
                }
                console.status("\(poll.line)  in \(DemoReport.seconds(elapsed))\(rate)", milestone: true)
                console.endStatus()
                return
            }
            // Plain output shows each quarter of the way once; a terminal shows every change.
            let quarter = poll.total > 0 ? poll.completed * 4 / poll.total : 0
            let milestone = quarter > lastQuarter && quarter < 4
            if milestone { lastQuarter = quarter }
            if poll.line != lastLine || milestone {
                console.status(poll.line, milestone: milestone)
                lastLine = poll.line
            }
            if clock.now >= deadline {
                console.endStatus()
                throw DemoFailure(
                    "timed out after \(DemoReport.shortSeconds(timeout)) waiting for \(what); last seen: \(poll.line)")
            }
            try await Task.sleep(for: Self.pollInterval)
        }
        console.endStatus()
        throw DemoFailure("timed out after \(DemoReport.shortSeconds(timeout)) waiting for \(what)")
    }

    /// Compares every original with A's local file, the remote file and B's local file; returns the
    /// number of bytes compared.
    private func compareCopies(of photos: [Photo], _ stage: Stage) async throws -> Int {
        var mismatches: [String] = []
        var compared = 0
        for photo in photos {
            let id = photo.attachmentId
            let original = photo.data
            let places: [(String, Data?)] = [
                ("A", try await stage.a.queue.attachment(id: id)?.localUri.flatMap(Self.contents)),
                ("remote", try await stage.remote.contents(of: photo.filename)),
                ("B", try await stage.b.queue.attachment(id: id)?.localUri.flatMap(Self.contents)),
            ]
            for (place, copy) in places {
                guard let copy else {
                    mismatches.append("\(id) is missing on \(place)")
                    continue
                }
                if copy == original {
                    compared += copy.count
                } else {
                    mismatches.append("\(id) on \(place) differs (\(copy.count) bytes, expected \(original.count))")
                }
            }
        }
        guard mismatches.isEmpty else {
            let shown = mismatches.prefix(5).joined(separator: "; ")
            let more = mismatches.count > 5 ? " and \(mismatches.count - 5) more" : ""
            throw DemoFailure("byte check failed: \(shown)\(more)")
        }
        return compared
    }

    /// The bytes of the local file at `path`, or `nil` when it cannot be read.
    private static func contents(_ path: String) -> Data? {
        try? Data(contentsOf: URL(fileURLWithPath: path))
    }

    /// Checks the end state: A has `count - 1` synced photos, B the same plus one archived, the remote
    /// `count - 1` files; each device's folder holds exactly its records' files.
    private func checkFinalState(_ stage: Stage, filesOnB: Int) async throws {
        let aState = try await stage.a.snapshot()
        let bState = try await stage.b.snapshot()
        let remoteFiles = try await stage.remote.objects(
            among: Set(aState.records.map(\.filename) + bState.records.map(\.filename)))
        var problems: [String] = []
        if aState.count(.synced) != count - 1 || aState.records.count != count - 1 {
            problems.append("A should hold \(count - 1) synced records, not \(describe(aState))")
        }
        if bState.count(.synced) != count - 1 || bState.count(.archived) != 1 || bState.records.count != count {
            problems.append("B should hold \(count - 1) synced records and 1 archived, not \(describe(bState))")
        }
        if aState.files.count != count - 1 { problems.append("A's folder has \(aState.files.count) files") }
        if bState.files.count != filesOnB {
            problems.append("B's folder has \(bState.files.count) files, not \(filesOnB)")
        }
        if remoteFiles.count != count - 1 { problems.append("the remote has \(remoteFiles.count) files") }
        guard problems.isEmpty else {
            throw DemoFailure("unexpected end state: " + problems.joined(separator: "; "))
        }
    }

    private func describe(_ snapshot: DemoSnapshot) -> String {
        let parts = AttachmentState.allCases.compactMap { state -> String? in
            let n = snapshot.count(state)
            return n == 0 ? nil : "\(n) \(state)"
        }
        return parts.isEmpty ? "none" : parts.joined(separator: ", ")
    }

    /// Prints the table of states and bytes per device.
    private func report(_ a: DemoDevice, _ b: DemoDevice, failed: Bool) async throws {
        let devices = [(name: "A", snapshot: try await a.snapshot()), (name: "B", snapshot: try await b.snapshot())]
        let known = Set(devices.flatMap { $0.snapshot.records.map(\.filename) })
        let remoteState = DemoSnapshot(records: [], files: try await remote.objects(among: known))
        if !failed {
            console.section("records by state, and files on disk:")
        }
        for line in DemoReport.table(devices: devices, remote: remoteState) {
            console.line("  " + line)
        }
        console.line()
    }

    // MARK: - Data

    /// The checklist rows A creates: ids `item-001`…, descriptions cycling through ``checks``.
    private func checklistRows() -> [ChecklistRow] {
        let width = String(count).count
        return (0..<count).map { index in
            let number = String(index + 1)
            let id = "item-" + String(repeating: "0", count: max(0, width - number.count)) + number
            var description = Self.checks[index % Self.checks.count]
            if count > Self.checks.count {
                description += ", area \(index / Self.checks.count + 1)"
            }
            return ChecklistRow(id: id, description: description, completed: 0, photoId: nil)
        }
    }
}
