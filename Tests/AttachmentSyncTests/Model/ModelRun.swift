import AttachmentSyncTesting
import Foundation
import GRDB
import Logging

@testable import AttachmentSync

/// Runs one ``ModelHistory`` on a real SQLite file and real folders, with simulated crashes and a faulty
/// remote, and checks the invariants after every step. Its result is the list of violations (empty: the
/// history kept every promise).
///
/// The invariants, all here:
/// 1. No loss: every committed attachment the app saved and did not delete has its bytes in its local file
///    or in the remote object.
/// 2. No wrong bytes: every local file a record claims, and every remote object of a saved attachment,
///    holds exactly the bytes that were saved (or that the other device uploaded).
/// 3. Records tell the truth: a record that claims a local file has it, as a regular file.
/// 4. No orphans: after a restart, every file in the attachments folder belongs to a record (its content,
///    or the partial download of an attachment still without content).
/// 5. Nothing outside: the only durable effects outside the attachments folder are removals of files the
///    app handed over with `moveFile`, after their attachment was committed.
/// 6. Handed-over files are never lost: a `saveFile(fileURL:)` that did not commit leaves its source as it
///    was; a symbolic link's target is never touched.
/// 7. All or nothing: a save that failed (not by a crash) left no record.
/// 8. The disk's failures are no failed tries: nothing is given up because the attachments folder was out
///    of reach (`EACCES`) for a while.
/// 9. Convergence: once faults stop, a bounded number of passes uploads every saved attachment, downloads
///    every referenced one that exists remotely, completes every delete, and leaves nothing queued.
///
/// With encryption on (``ModelSetup/encrypted``) the remote holds ciphertext: 1, 2 and 9 compare the
/// content a stored object decrypts to, and every download is checked byte for byte (the format
/// authenticates it, so even another device's file without a hash must arrive exact). And (see
/// ``ModelEncryption``):
/// 10. Nothing in the clear: every stored object starts with the format's magic and holds no content's
///     first 32 bytes.
/// 11. A missing key only makes transfers wait: nothing is given up for it, and once the keys are back,
///     everything converges.
/// 12. A rotation that completed while no key was lost leaves every file it had to look at under the new key.
final class ModelRun {
    let history: ModelHistory
    let root: URL
    let store = RemoteStore()
    /// The system's background transfer service (when the setup hands transfers off); it outlives restarts.
    private(set) lazy var background = BackgroundStore(bodies: root.appendingPathComponent("service"), remote: store)
    let clock = ManualClock()
    /// The device's network, which steps take down, make metered and bring back; it outlives restarts.
    let network = ManualNetworkConditions()
    /// The app's keys and the encryption harness, in an encrypted setup; they outlive restarts.
    let encryption: ModelEncryption?
    private(set) var violations: [String] = []
    private(set) var stepIndex = -1

    /// Takes the attachments folder out of reach for a few steps; it outlives restarts.
    let access: AccessSwitch
    /// Steps left until the folder is in reach again.
    private var unreachableSteps = 0
    /// The queue's startup failed while the folder was out of reach (the next call tries again), or its
    /// check of the files did not complete: the invariants that need a complete startup wait for the next.
    private var startupIncomplete = false

    // The current simulated process.
    private(set) var crash = CrashSwitch()
    private(set) var disk: SimulatedDisk
    private(set) var db: LocalDatabase!
    private(set) var queue: AttachmentQueue!
    private(set) var syncing = false
    /// The queue's remote in an encrypted setup: the model's behind the app's keys.
    private(set) var encryptedRemote: EncryptedRemoteStorage?
    private var crashArmed = false

    // What the app knows.
    private struct Saved {
        var id: String
        var data: Data
        var filename: String
    }

    /// The dictionary key of an id: its bytes, escaped (Swift's `==` would merge ids that differ only in
    /// their Unicode form, which SQLite keeps apart).
    static func key(_ id: String) -> String { FileName.safeName(id, keepingDots: true) }
    private var committed: [String: Saved] = [:]
    private var uncertainSaves: [String: Saved] = [:]
    private var uncertainDeletes: [String: String] = [:]
    /// Deleted attachments, with their remote filename.
    private var deleted: [String: Saved] = [:]
    private var seeded: [String: (id: String, data: Data)] = [:]
    /// Seeded attachments whose hash the queue can know: the remote keeps it, or an emission has carried the
    /// row's. Before that, wrong bytes of the right size cannot be told (the documented limit), so the
    /// bytes of the others are checked only from then on.
    private var hashKnown: Set<String> = []
    private struct Handover {
        var id: String
        var path: String
        var target: String?
        var data: Data
        var move: Bool
        /// `true` committed, `false` not committed, `nil` not known yet (a crash came during the save).
        var committed: Bool?
    }
    private var handovers: [Handover] = []
    private var handoverCount = 0

    /// The longest any retry may wait, whatever a server's `Retry-After` says.
    static let maximumDelay: Duration = .seconds(30)

    static let schema = Schema(tables: [
        Table(
            name: "rows", columns: [.text("attachment_id"), .text("filename"), .text("content_hash"), .integer("size")]),
        createAttachmentTable(name: "attachments"),
    ])

    var attachments: String { root.appendingPathComponent("attachments").path }
    var userFolder: String { root.appendingPathComponent("user").path }
    var databasePath: String { root.appendingPathComponent("app.sqlite").path }
    /// Where the app's key rotation downloads the stored files it re-encrypts (ciphertext only).
    var rotationWork: String { root.appendingPathComponent("rotation").path }

    init(_ history: ModelHistory) throws {
        self.history = history
        let base =
            FileManager.default.fileExists(atPath: "/dev/shm")
            ? URL(fileURLWithPath: "/dev/shm") : FileManager.default.temporaryDirectory
        root = base.appendingPathComponent("attachment-sync-model-\(UUID().uuidString)")
        try FileManager.default.createDirectory(
            at: root.appendingPathComponent("user"), withIntermediateDirectories: true)
        access = AccessSwitch(folder: root.appendingPathComponent("attachments").path)
        disk = SimulatedDisk(crash: crash, insensitive: history.setup.insensitiveDisk, access: access)
        encryption = history.setup.encrypted ? ModelEncryption() : nil
    }

    deinit {
        try? FileManager.default.removeItem(at: root)
    }

    // MARK: - Running

    /// Runs every step, checking the invariants after each, then lets the queue converge.
    func run() async -> [String] {
        do {
            try await open()
            for (index, step) in history.steps.enumerated() {
                stepIndex = index
                await perform(step)
                if crash.hasCrashed {
                    try await restart()
                } else if crashArmed, !isCrashStep(step) {
                    crash.disarm()
                    crashArmed = false
                }
                if unreachableSteps > 0 {
                    unreachableSteps -= 1
                    if unreachableSteps == 0 { try await backInReach() }
                }
                await checkInvariants(afterRestart: false)
                if violations.count > 0 { break }
            }
            if violations.isEmpty {
                stepIndex = history.steps.count
                try await converge()
            }
            await queue?.close()
            try? await db?.close()
        } catch {
            violations.append("the harness failed: \(error)")
            await queue?.close()
            try? await db?.close()
        }
        return violations
    }

    private func isCrashStep(_ step: ModelStep) -> Bool {
        if case .crash = step { return true }
        return false
    }

    /// Records a broken invariant; `kind` groups violations for the shrinker (which keeps a history failing
    /// with the same kind).
    func violation(_ text: String, kind: String) {
        violations.append("[\(kind)] after step \(stepIndex): \(text)")
    }

    private func open() async throws {
        crash = CrashSwitch()
        disk = SimulatedDisk(crash: crash, insensitive: history.setup.insensitiveDisk, access: access)
        var grdb = GRDB.Configuration()
        grdb.busyMode = .timeout(5)
        let pool = try DatabasePool(path: databasePath, configuration: grdb)
        pool.add(transactionObserver: CommitGate(crash), extent: .databaseLifetime)
        db = try LocalDatabase(writer: pool, schema: Self.schema)
        var configuration = AttachmentQueue.Configuration(attachmentsDirectory: attachments)
        configuration.clock = clock
        configuration.currentDate = { [clock] in clock.date }
        configuration.syncInterval = .zero
        configuration.syncThrottleDuration = .zero
        configuration.retryBackoff = RetryBackoff(
            initialDelay: .seconds(1), maximumDelay: Self.maximumDelay, jitter: false)
        configuration.maxAttempts = history.setup.maxAttempts
        configuration.archivedCacheLimit = history.setup.archivedCacheLimit
        configuration.maxCacheBytes = history.setup.maxCacheBytes
        configuration.downloadPolicy = history.setup.onDemand ? .onDemand : .eager
        configuration.maxConcurrentTransfers = history.setup.concurrency
        configuration.networkConditions = network
        if let above = history.setup.unmeteredAbove { configuration.networkPolicy = .unmetered(above: above) }
        configuration.files = disk
        configuration.startupFileCheck = history.setup.backgroundStartupCheck ? .inBackground : .beforeReady
        if ProcessInfo.processInfo.environment["ATTACHMENT_SYNC_MODEL_DEBUG"] != nil {
            var logger = Logger(label: "model") { StreamLogHandler.standardError(label: $0) }
            logger.logLevel = .debug
            configuration.logger = logger
        }
        if history.setup.background {
            var transfers = BackgroundTransfers(service: ModelBackgroundService(store: background, crash: crash))
            // No grace: every adoption may take back any transfer the service neither runs nor reported, so
            // the histories test that adoption never mistakes one being handed or just finished for lost.
            transfers.recoveryDelay = .zero
            configuration.backgroundTransfers = transfers
        }
        let remote = ModelRemote(store: store, disk: disk)
        encryptedRemote = encryption?.wrap(remote)
        queue = AttachmentQueue(
            db: db, remoteStorage: encryptedRemote ?? remote, configuration: configuration,
            localStorage: FileManagerStorageAdapter(files: disk))
        do {
            try await queue.waitForInit()
        } catch  where access.isDenied {
            // Startup cannot check the files it cannot see: it fails, and the next call tries again.
            startupIncomplete = true
            return
        }
        // With the check in the background, sync starts while it runs.
        if syncing { try await queue.startSync() }
    }

    /// The folder is in reach again. A startup that could not complete meanwhile (its check of the files
    /// failed, and only the next startup checks again) is done again with a clean restart, and the
    /// invariants of a restart are checked.
    private func backInReach() async throws {
        access.deny(false)
        guard startupIncomplete, !crash.hasCrashed else { return }
        try await restart()
    }

    /// The process dies (if the crash switch has not already killed it, it is a clean stop) and starts again
    /// on the same database and folders; startup runs, and what was uncertain is settled.
    func restart() async throws {
        await queue.close()
        try await db.close()
        // While the app is dead, the service finishes what it was handed (all of it, or one transfer).
        if history.setup.background { await background.run(stepIndex.isMultiple(of: 2) ? 1_000 : 1) }
        crashArmed = false
        startupIncomplete = false
        try await open()
        try await settleUncertainty()
        // The invariants after a restart (no orphans, missing files noticed) hold once the check is done.
        if !startupIncomplete {
            do {
                try await queue.waitForStartupCheck()
            } catch  where access.isDenied {
                startupIncomplete = true
            }
        }
        await checkInvariants(afterRestart: !startupIncomplete)
    }

    /// After a crash: a save or delete interrupted by it either committed or did not; the table says which.
    private func settleUncertainty() async throws {
        for (key, saved) in uncertainSaves {
            if let record = try await record(saved.id), record.contentHash == FileStreaming.sha256(saved.data) {
                committed[key] = saved
                deleted[key] = nil
                settleHandovers(saved.id, committed: true)
            } else {
                settleHandovers(saved.id, committed: false)
            }
        }
        uncertainSaves = [:]
        for (key, id) in uncertainDeletes {
            let record = try await record(id)
            if record == nil || record?.state == .queuedDelete, let saved = committed[key] {
                committed[key] = nil
                deleted[key] = saved
            }
        }
        uncertainDeletes = [:]
    }

    private func settleHandovers(_ id: String, committed: Bool) {
        for index in handovers.indices
        where Self.key(handovers[index].id) == Self.key(id) && handovers[index].committed == nil {
            handovers[index].committed = committed
        }
    }

    private func record(_ id: String) async throws -> AttachmentRecord? {
        let store = AttachmentStore(table: "attachments")
        return try await db.readTransaction { tx in try store.record(id: id, in: tx) }
    }

    func records() async throws -> [AttachmentRecord] {
        let store = AttachmentStore(table: "attachments")
        return try await db.readTransaction { tx in try store.records(in: tx) }
    }

    // MARK: - Steps

    private func perform(_ step: ModelStep) async {
        switch step {
        case .save(let id, let content, let size, let ext, let watch):
            let data = ModelHistory.bytes(content: content, size: size)
            encryption?.note(data)
            await save(id: id, data: data, handover: nil, watch: watch) { queue in
                try await queue.saveFile(
                    data: data, mediaType: nil, fileExtension: ext, id: id, updateHook: Self.hook(watch))
            }
        case .saveFile(let id, let content, let size, let move, let symlink, let watch):
            let data = ModelHistory.bytes(content: content, size: size)
            encryption?.note(data)
            handoverCount += 1
            let path = (userFolder as NSString).appendingPathComponent("file\(handoverCount).bin")
            var target: String?
            do {
                if symlink {
                    target = path + ".target"
                    try data.write(to: URL(fileURLWithPath: target!))
                    try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: target!)
                } else {
                    try data.write(to: URL(fileURLWithPath: path))
                }
            } catch {
                violation("the harness could not write \(path): \(error)", kind: "harness")
                return
            }
            let handover = Handover(id: id, path: path, target: target, data: data, move: move, committed: nil)
            await save(id: id, data: data, handover: handover, watch: watch) { queue in
                try await queue.saveFile(
                    fileURL: URL(fileURLWithPath: path), mediaType: nil, fileExtension: "bin", id: id, moveFile: move,
                    updateHook: Self.hook(watch))
            }
        case .delete(let id):
            do {
                try await queue.deleteFile(attachmentId: id) { tx, attachment in
                    try tx.execute(sql: "DELETE FROM rows WHERE attachment_id = ?", arguments: [attachment.id])
                }
                if let saved = committed[Self.key(id)] { deleted[Self.key(id)] = saved }
                committed[Self.key(id)] = nil
            } catch {
                if crash.hasCrashed { uncertainDeletes[Self.key(id)] = id }
            }
        case .watch(let id):
            // An attachment's filename never changes (attachments are immutable): another device's is
            // `<id>.bin` whether or not it has been uploaded yet.
            let filename =
                committed[Self.key(id)]?.filename
                ?? (ModelHistory.seededIds.contains(where: { $0.unicodeScalars.elementsEqual(id.unicodeScalars) })
                    ? "\(id).bin" : "\(id).jpg")
            _ = try? await db.execute(
                sql: "INSERT OR IGNORE INTO rows (id, attachment_id, filename) VALUES (?, ?, ?)",
                parameters: [id, id, filename])
        case .unwatch(let id):
            _ = try? await db.execute(sql: "DELETE FROM rows WHERE attachment_id = ?", parameters: [id])
        case .emit:
            await emit()
        case .seed(let id, let content, let size, let metadata, let rowHash, let rowSize):
            guard seeded[Self.key(id)] == nil else { return }
            let data = ModelHistory.bytes(content: content, size: size)
            let hash = FileStreaming.sha256(data)
            seeded[Self.key(id)] = (id, data)
            // An encrypted file is authenticated: its bytes are known to be the upload's, hash or not.
            if metadata || encryption != nil { hashKnown.insert(Self.key(id)) }
            if let encryption {
                encryption.note(data)
                do {
                    try await encryption.seed(store, id: id, filename: "\(id).bin", data: data, keepsHash: metadata)
                } catch {
                    violation("another device could not upload \(id.debugDescription): \(error)", kind: "harness")
                }
            } else {
                await store.seed("\(id).bin", data, sha256: metadata ? hash : nil)
            }
            let rowHashValue: String? = rowHash ? hash : nil
            let rowSizeValue: Int64? = rowSize ? Int64(size) : nil
            _ = try? await db.execute(
                sql:
                    "INSERT OR REPLACE INTO rows (id, attachment_id, filename, content_hash, size) VALUES (?, ?, ?, ?, ?)",
                parameters: [id, id, "\(id).bin", rowHashValue, rowSizeValue])
        case .syncNow:
            try? await queue.syncNow()
        case .download(let id):
            if let attachment = try? await queue.download(attachmentId: id), let path = attachment.localUri {
                let seededKnown = hashKnown.contains(Self.key(id)) ? seeded[Self.key(id)]?.data : nil
                if let expected = committed[Self.key(id)]?.data ?? seededKnown, read(path) != expected {
                    violation(
                        "download(attachmentId: \(id.debugDescription)) returned a file with other bytes", kind: "bytes"
                    )
                }
            }
        case .purge(let id):
            _ = try? await queue.purge(attachmentId: id)
        case .pin(let id):
            try? await queue.pin(attachmentId: id)
        case .expireCache:
            try? await queue.expireCache()
        case .startSync:
            syncing = true
            try? await queue.startSync()
        case .stopSync:
            syncing = false
            await queue.stopSync()
        case .advance(let seconds):
            await clock.advance(by: .seconds(seconds))
        case .fault(let fault, let count):
            for _ in 0..<count { await store.inject(fault) }
        case .crash(let operations):
            crash.arm(after: operations)
            crashArmed = true
        case .restart:
            do { try await restart() } catch { violation("restart failed: \(error)", kind: "harness") }
        case .retryAll:
            _ = try? await queue.retryAll()
        case .network(let kind):
            network.update([NetworkConditions.offline, .expensive, .unrestricted][kind])
        case .raise(let id):
            try? await queue.raisePriority(attachmentId: id)
        case .unreachable(let steps):
            access.deny(true)
            unreachableSteps = max(unreachableSteps, steps)
        case .serviceRuns(let count):
            await background.run(count)
        case .serviceLoses:
            await background.loseOne()
        case .serviceRepeats:
            await background.repeatLast()
        case .rotateKey, .loseKey, .restoreKey:
            await performKeyStep(step)
        }
        // While syncing, let the background work finish before looking.
        if syncing, !crash.hasCrashed { try? await queue.syncNow() }
    }

    /// The seed app's hook: the row refers to the new attachment in the same transaction.
    private static func hook(_ watch: Bool) -> @Sendable (SqlTransaction, AttachmentSync.Attachment) throws -> Void {
        { tx, attachment in
            guard watch else { return }
            try tx.execute(
                sql: "INSERT OR REPLACE INTO rows (id, attachment_id, filename) VALUES (?, ?, ?)",
                arguments: [attachment.id, attachment.id, attachment.filename])
        }
    }

    private func save(
        id: String, data: Data, handover: Handover?, watch: Bool,
        _ call: (AttachmentQueue) async throws -> AttachmentSync.Attachment
    ) async {
        // Ids are unique and attachments immutable (the seed's contract): an app does not save new content
        // under the id of an attachment it still has, even one whose local copy was evicted (only its
        // remote copy is left, which the new upload would replace; detecting that is issue 12's).
        if committed[Self.key(id)] != nil, (try? await record(id)) == nil { return }
        let before = (try? await record(id)) ?? nil
        let existed = before != nil
        // A record being deleted may be gone by the time the save looks (its delete transfer runs meanwhile):
        // the save may then fail or succeed.
        let mayHaveGone = before?.state == .queuedDelete
        if var handover {
            handover.committed = nil
            handovers.append(handover)
        }
        do {
            let saved = try await call(queue)
            if existed, !mayHaveGone {
                violation("saving over existing attachment \(id.debugDescription) succeeded", kind: "all-or-nothing")
            }
            if saved.contentHash != FileStreaming.sha256(data) {
                violation("\(id.debugDescription) saved with another hash", kind: "all-or-nothing")
            }
            committed[Self.key(id)] = Saved(id: id, data: data, filename: saved.filename)
            deleted[Self.key(id)] = nil
            if handover != nil { handovers[handovers.count - 1].committed = true }
        } catch {
            if existed {
                if handover != nil { handovers[handovers.count - 1].committed = false }
                return
            }
            if crash.hasCrashed {
                uncertainSaves[Self.key(id)] = Saved(id: id, data: data, filename: "")
                return
            }
            if handover != nil { handovers[handovers.count - 1].committed = false }
            // All or nothing: a save that failed left no record.
            if let record = try? await record(id) {
                violation(
                    "saveFile of \(id.debugDescription) threw \(error) but left a record in \(record.state)",
                    kind: "all-or-nothing")
            }
        }
    }

    private func emit() async {
        guard
            let items = try? await db.getAll(
                sql: "SELECT attachment_id, filename, content_hash, size FROM rows ORDER BY id",
                mapper: { cursor in
                    try WatchedAttachmentItem(
                        id: cursor.getString(name: "attachment_id"), filename: cursor.getString(name: "filename"),
                        contentHash: cursor.getStringOptional(name: "content_hash"),
                        size: cursor.getInt64Optional(name: "size"))
                })
        else { return }
        await queue.reconcile(items)
        for item in items where item.contentHash != nil { hashKnown.insert(Self.key(item.id)) }
    }

    // MARK: - Invariants

    private func read(_ path: String) -> Data? {
        FileManager.default.contents(atPath: disk.resolve(path))
    }

    private func checkInvariants(afterRestart: Bool) async {
        let before = violations.count
        await check(afterRestart: afterRestart)
        // Background work may have moved between two reads: look again with sync stopped before blaming.
        if violations.count > before, syncing, !crash.hasCrashed {
            violations.removeSubrange(before...)
            await queue.stopSync()
            // stopSync returns before interrupted transfers have wound down: a download moved into place
            // commits in a task of its own. Look once none is in flight.
            await queue.waitUntilIdle()
            await check(afterRestart: afterRestart)
            try? await queue.startSync()
        }
    }

    private func check(afterRestart: Bool) async {
        guard !crash.hasCrashed, let records = try? await records() else { return }
        let byId = Dictionary(records.map { (Self.key($0.id), $0) }, uniquingKeysWith: { first, _ in first })
        let objects = await store.objects

        // 1, 2: every committed attachment has its bytes somewhere, and every copy is right. Until a startup
        // that failed while the folder was out of reach completes, the records may not have been made true
        // yet (an interrupted save still under its staging name, say): 1 to 3 wait for it.
        let startupDone = !startupIncomplete
        for (key, saved) in committed where startupDone {
            let id = saved.id
            let record = byId[key]
            let local = record?.localPath.map { read(attachmentsPath($0)) } ?? nil
            let remote = content(of: objects[RemoteStore.key(saved.filename)]?.data, id: id, filename: saved.filename)
            if let local, local != saved.data {
                violation("\(id.debugDescription)'s local file holds other bytes than were saved", kind: "bytes")
            }
            if let remote, remote != saved.data {
                violation("\(id.debugDescription)'s remote object holds other bytes than were saved", kind: "bytes")
            }
            if local != saved.data && remote != saved.data {
                violation(
                    "LOST: \(id.debugDescription) (\(saved.data.count) bytes) is neither on this device nor remote "
                        + "(record: \(record.map { "\($0.state), local \($0.localPath ?? "nil")" } ?? "none"))",
                    kind: "lost")
            }
        }
        // Without a hash, the size (which the remote always reports) must still be right: no truncated body.
        for (key, (id, data)) in seeded where startupDone && !hashKnown.contains(key) {
            if let path = byId[key]?.localPath, let local = read(attachmentsPath(path)), local.count != data.count {
                violation(
                    "\(id.debugDescription)'s downloaded file is \(local.count) bytes, the upload \(data.count)",
                    kind: "bytes")
            }
        }
        for (key, (id, data)) in seeded where startupDone && hashKnown.contains(key) {
            if let path = byId[key]?.localPath, let local = read(attachmentsPath(path)), local != data {
                violation(
                    "\(id.debugDescription)'s downloaded file holds other bytes than the other device uploaded",
                    kind: "bytes")
            }
        }
        // 3: records tell the truth.
        for record in records where startupDone && record.state != .queuedDelete {
            guard let path = record.localPath else { continue }
            // Looked at directly: the harness sees the folder even while the queue cannot.
            let info = try? SystemFileOperations().info(atPath: disk.resolve(attachmentsPath(path)))
            if info == nil {
                violation(
                    "\(record.id.debugDescription) (\(record.state)) claims \(path), which is not there", kind: "claims"
                )
            } else if info?.kind != .regular {
                violation(
                    "\(record.id.debugDescription)'s file \(path) is not a regular file (\(info!.kind))", kind: "claims"
                )
            }
        }
        // 8: nothing given up for the disk's sake.
        for record in records where record.givenUp != nil {
            if let error = record.lastError, error.contains(String(cString: strerror(EACCES))) {
                violation(
                    "\(record.id.debugDescription) was given up (\(record.givenUp!)) because the folder was out of "
                        + "reach: \(error)", kind: "unreachable")
            }
        }
        // 10, 11: nothing in the clear, nothing given up for a missing key.
        if let encryption { checkEncryption(encryption, records: records, objects: objects) }
        // 4: no orphans after a restart.
        if afterRestart { checkNoOrphans(records, handedBodies: await handedBodies()) }
        // 5: nothing outside the attachments folder.
        let movedSources = Set(handovers.filter { $0.move && $0.committed == true }.map(\.path))
        for operation in crash.operations {
            let parts = operation.split(separator: " ", maxSplits: 2).map(String.init)
            guard parts.count >= 2 else { continue }
            let written: [String]
            switch parts[0] {
            case "rename": written = Array(parts.dropFirst())
            case "link": written = parts.count > 2 ? [parts[2]] : []
            case "open", "write", "remove", "mkdir": written = [parts[1]]
            default: written = []  // commits, flushes, remote calls
            }
            // The app's key rotation downloads into its own work folder (not the queue's doing).
            for path in written
            where !path.hasPrefix(attachments + "/") && path != attachments && !path.hasPrefix(rotationWork + "/") {
                if parts[0] == "remove", movedSources.contains(path) { continue }
                violation("a durable operation outside the attachments folder: \(operation)", kind: "outside")
            }
        }
        // 6, 7: handed-over files.
        for handover in handovers {
            if let target = handover.target, FileManager.default.contents(atPath: target) != handover.data {
                violation("the target of symbolic link \(handover.path) was changed or removed", kind: "handover")
            }
            if handover.committed == false || !handover.move {
                let present = FileManager.default.contents(atPath: handover.path)
                if present != handover.data {
                    violation(
                        "the file handed to saveFile(fileURL: \(handover.path), moveFile: \(handover.move)) for "
                            + "\(handover.id.debugDescription) is \(present == nil ? "gone" : "changed") though "
                            + (handover.move ? "the save did not commit" : "it was only copied"), kind: "handover")
                }
            }
        }
    }

    /// The content of attachment `id`'s stored object: its bytes, or what they decrypt to in an encrypted
    /// setup (see ``ModelEncryption/content(of:id:key:)``).
    private func content(of stored: Data?, id: String, filename: String) -> Data? {
        encryption?.content(of: stored, id: id, key: RemoteStore.key(filename)) ?? stored
    }

    private func attachmentsPath(_ relative: String) -> String {
        (attachments as NSString).appendingPathComponent(relative)
    }

    /// The encrypted copies that recorded hand-offs send as their bodies (the queue keeps them until the
    /// transfer's result is adopted).
    private func handedBodies() async -> [String] {
        guard history.setup.background, let db else { return [] }
        return
            (try? await db.getAll(
                sql: "SELECT body_file FROM attachment_sync_handoffs WHERE body_file LIKE '.attachment-sync-%'"
            ) { try $0.getString(name: "body_file") }) ?? []
    }

    private func checkNoOrphans(_ records: [AttachmentRecord], handedBodies: [String]) {
        let insensitive = history.setup.insensitiveDisk
        let fold: (String) -> String = { insensitive ? SimulatedDisk.folded($0) : $0 }
        var allowed = Set((records.compactMap(\.localPath) + handedBodies).map(fold))
        for record in records where record.localPath == nil {
            if let partial = try? FileName.downloadingName(for: record.localName()) {
                allowed.insert(fold(partial))
                allowed.insert(fold(FileName.resumeValidatorName(for: partial)))
            }
            // With the check in the background and sync on, a download placed but not committed before the
            // crash may be downloading again while the check runs: its file is left to that download, which
            // replaces it (or to the next startup, should it fail).
            if history.setup.backgroundStartupCheck, record.state == .queuedDownload,
                let name = try? record.localName()
            {
                allowed.insert(fold(name))
            }
        }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: attachments)) ?? []
        for name in names where !allowed.contains(fold(name)) {
            violation("orphan after restart: \(name) belongs to no record", kind: "orphan")
        }
    }

    // MARK: - Convergence

    /// After convergence every result the service reported has been adopted, and the service holds no
    /// upload and no download of an object the remote has. It may hold a download of an object that does
    /// not exist (a row refers to an attachment no device uploaded): every pass asks for it again, as it
    /// should, and a pass the table's watch triggered may have handed it over a moment ago.
    private func checkServiceDrained() async {
        let results = await background.results.keys.sorted()
        if !results.isEmpty {
            violation("converged: the background service still holds results \(results)", kind: "converge")
        }
        let objects = await store.objects
        if ProcessInfo.processInfo.environment["ATTACHMENT_SYNC_MODEL_DEBUG"] != nil {
            print("left with the service:", await background.handed.values.map(\.request.headers))
        }
        for transfer in await background.handed.values {
            let name = transfer.request.headers.first { $0.name == "x-name" }?.value ?? ""
            if transfer.direction == .upload || objects[RemoteStore.key(name)] != nil {
                violation(
                    "converged: the background service still holds the \(transfer.direction) of \(name)",
                    kind: "converge")
            }
        }
    }

    /// Faults stop; a bounded number of rounds (retry what was given up, reconcile, sync, let retry times
    /// pass) must bring the queue to rest with everything in place.
    private func converge() async throws {
        access.deny(false)
        unreachableSteps = 0
        await store.clearFaults()
        crash.disarm()
        network.update(.unrestricted)
        // The app gets every key back, and tells the queue.
        encryption?.keys.restoreAll()
        try await restart()
        if encryption != nil { _ = try? await queue.keysDidChange() }
        // Each round waits the longest a retry may be delayed, no more, and retries only what was given up (as
        // an app's "try again" would): an attachment parked beyond the backoff ceiling (an absurd Retry-After
        // taken at its word) does not converge. (`retryAll()` would bring it forward and hide that.)
        for _ in 0..<6 {
            for record in (try? await records()) ?? [] where record.givenUp != nil {
                _ = try? await queue.retry(attachmentId: record.id)
            }
            await emit()
            try? await queue.syncNow()
            await background.run(1_000)
            try? await queue.syncNow()
            await clock.advance(by: Self.maximumDelay + .seconds(1))
        }
        await emit()
        try? await queue.syncNow()
        // The service runs what it holds and the queue adopts it; adoption may queue (and hand over) a
        // transfer again, so a few rounds, bounded.
        for _ in 0..<4 {
            await background.run(1_000)
            try? await queue.syncNow()
            if await background.handed.isEmpty, await background.results.isEmpty { break }
        }
        if history.setup.background { await checkServiceDrained() }
        try await restart()

        let records = try await records()
        let byId = Dictionary(records.map { (Self.key($0.id), $0) }, uniquingKeysWith: { first, _ in first })
        let objects = await store.objects
        let watched = Set(
            try await db.getAll(sql: "SELECT attachment_id FROM rows") {
                Self.key(try $0.getString(name: "attachment_id"))
            })
        for (key, saved) in committed {
            let id = saved.id
            if content(of: objects[RemoteStore.key(saved.filename)]?.data, id: id, filename: saved.filename)
                != saved.data
            {
                violation("converged: \(id.debugDescription) was never uploaded", kind: "converge")
            }
            if watched.contains(key), let record = byId[key], record.state != .synced {
                violation("converged: \(id.debugDescription) is referenced but \(record.state)", kind: "converge")
            }
        }
        for (key, saved) in deleted where committed[key] == nil {
            let (id, filename) = (saved.id, saved.filename)
            // A row that still refers to it makes a new record (that finds nothing to download).
            if let record = byId[key], !watched.contains(key) {
                violation(
                    "converged: deleted \(id.debugDescription) still has a record (\(record.state))", kind: "converge")
            }
            if objects[RemoteStore.key(filename)] != nil {
                violation(
                    "converged: deleted \(id.debugDescription) still has its remote object \(filename)",
                    kind: "converge")
            }
        }
        // Rows whose ids the queue must refuse (another Unicode form) get no record.
        for (key, (id, _)) in seeded where watched.contains(key) && (try? FileName.validateId(id)) != nil {
            guard let record = byId[key] else {
                violation("converged: referenced \(id.debugDescription) has no record", kind: "converge")
                continue
            }
            if record.state != .synced {
                violation("converged: referenced \(id.debugDescription) is \(record.state)", kind: "converge")
            }
        }
        for record in records where record.givenUp != nil {
            if record.givenUp == .queuedDownload, objects[RemoteStore.key(record.filename)] == nil { continue }
            violation(
                "converged: \(record.id.debugDescription) is still given up (\(record.givenUp!))", kind: "converge")
        }
        for record in records where [.queuedUpload, .queuedDelete].contains(record.state) {
            violation("converged: \(record.id.debugDescription) is still \(record.state)", kind: "converge")
        }
        for record in records where record.state == .queuedDownload && objects[RemoteStore.key(record.filename)] != nil
        {
            violation("converged: \(record.id.debugDescription) is still queued for download", kind: "converge")
        }
        // 11: with every key back, nothing waits for one.
        if encryption != nil, let status = await queue.status.first(where: { _ in true }) {
            for waiting in status.waitingForKeys {
                violation(
                    "converged: \(waiting.attachmentId.debugDescription) still waits for a key", kind: "converge")
            }
        }
    }
}
