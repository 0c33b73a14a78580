import Foundation
import Logging

/// Adopting what the background transfer service did: each result once, in this process or after a
/// relaunch, by the steps ``HandOffPolicy`` decides. A result is acknowledged to the service only once its
/// hand-off record is gone (removed in the transaction that booked it), so a crash at any point leaves either
/// the record and the result (adopted again, from the start) or neither.
extension AttachmentQueue {
    /// Reads the service's results and the queue's hand-off records and carries out what they call for, and
    /// returns when that is done: every result the service held when it was called is adopted (or left for a
    /// later try by an error). Adoptions run one at a time, in a task of their own (a caller's cancellation,
    /// `stopSync`'s say, must not cut one short between its commit and its acknowledgement); a call while one
    /// runs makes it go round once more and waits for it. Only the lease holder adopts. Errors are logged;
    /// the next trigger tries again.
    func adoptHandOffs() async {
        guard let context = handOffContext else { return }
        if let running = adoption.task {
            adoption.again = true
            await running.value
            return
        }
        let task = Task { await self.adoptRounds(context) }
        adoption.task = task
        await task.value
    }

    private func adoptRounds(_ context: HandOffContext) async {
        repeat {
            adoption.again = false
            guard await holdsCurrentLease() else { break }
            await adoptOnce(context)
        } while adoption.again
        adoption.task = nil
    }

    /// Adopts results as the service says they may have arrived, while syncing.
    func followBackgroundResults(_ service: any BackgroundTransferService) async {
        for await _ in service.resultsMayHaveArrived() {
            await adoptHandOffs()
        }
    }

    private func adoptOnce(_ context: HandOffContext) async {
        let service = context.options.service
        let handOffs = context.store
        let steps: [HandOffPolicy.Step]
        let records: [HandOffStore.HandOff]
        let now = wallClock.milliseconds()
        let grace = context.options.recoveryDelay.clampedMilliseconds
        do {
            // The records first, then the hand-overs in progress, then the service. A record was written
            // before its hand-over began; one no longer being handed when `handing` is read had reached the
            // service by then, so the service names it in `running()` or `results()` (read in that order,
            // as a transfer leaves the first for the second), unless the service lost it. Read in any other
            // order, a hand-over finishing between the reads looks lost.
            records = try await db.readTransaction { tx in try handOffs.handOffs(in: tx) }
            let handing = context.handing.withLock { $0 }
            let running = try await service.running()
            let results = try await service.results()
            steps = HandOffPolicy.steps(
                records: records, running: running, results: results, handing: handing, now: now, grace: grace)
            scheduleRecoveryCheck(records, running: running, results: results, now: now, grace: grace)
        } catch {
            logError("reading the background transfer service's results failed", error)
            return
        }
        var requeued = false
        for step in steps {
            let result: BackgroundTransferResult?
            switch step {
            case .acknowledge(let reported):
                result = reported
            case .confirmUpload(let handOff, let reported):
                result = reported
                await confirmUpload(handOff, reported, context)
            case .adoptDownload(let handOff, let reported):
                result = reported
                await adoptDownload(handOff, reported, context)
            case .failed(let handOff, let reported):
                result = reported
                await bookHandOffFailure(handOff, Self.error(of: reported, handOff), context)
                requeued = true
            case .recover(let handOff):
                result = nil
                logger.info(
                    "a background transfer was neither running nor reported: taking it back",
                    metadata: ["attachment": "\(handOff.attachmentId)", "transfer": "\(handOff.id)"])
                await recover(handOff, context)
                requeued = true
            }
            guard let result else { continue }
            do {
                let pending = try await db.readTransaction { tx in try handOffs.handOff(id: result.id, in: tx) }
                if pending == nil { try await service.acknowledge(result.id) }
            } catch {
                logError("acknowledging a background transfer's result failed", error)
            }
        }
        if requeued { trigger() }
    }

    /// An upload the service says went through (or found an object there): counted done once the remote
    /// holds an object of its size and SHA-256, in the transaction that removes its record.
    private func confirmUpload(
        _ handOff: HandOffStore.HandOff, _ result: BackgroundTransferResult, _ context: HandOffContext
    ) async {
        guard let record = await currentRecord(of: handOff, context) else { return }
        let stored: RemoteObjectInfo?
        do {
            stored = try await context.remote.storedObject(for: record.attachment(in: attachmentsDirectory))
        } catch {
            logError("confirming a background upload failed; it is confirmed later", error, id: record.id)
            return
        }
        switch Self.confirmation(of: handOff, stored: stored, status: result.statusCode) {
        case .stored(let size):
            guard let size = contentSize(of: record, handOff, stored: size) else { return }
            await commitUpload(handOff, of: record, size: size, context)
        case .otherContent(let sha256):
            await bookHandOffFailure(
                handOff,
                AttachmentError(
                    code: .conflict,
                    message: "remote storage holds other content (SHA-256 \(sha256)) under the name of attachment "
                        + "\(String(reflecting: record.id))", attachmentId: record.id), context)
        case .unconfirmed(let why):
            await bookHandOffFailure(
                handOff,
                AttachmentError(
                    code: .remoteFailure,
                    message: "a background upload of attachment \(String(reflecting: record.id)) could not be "
                        + "confirmed: \(why)", attachmentId: record.id), context)
        }
        trigger()
    }

    /// What the remote's object says of a handed-off upload.
    enum UploadConfirmation: Equatable {
        /// The object is the upload's content (`size` bytes).
        case stored(size: Int64)
        /// The object holds other content: its SHA-256.
        case otherContent(String)
        /// Nothing shows it is stored (no object, another size, no SHA-256 kept with it after a 412).
        case unconfirmed(String)
    }

    /// Whether `stored` is the content the hand-off uploaded. Without a SHA-256 kept with the object, a
    /// 2xx of the create-only request (whose `Content-MD5` the server checked) and the right size confirm
    /// it; a 412 then cannot tell whose object it is.
    static func confirmation(of handOff: HandOffStore.HandOff, stored: RemoteObjectInfo?, status: Int?)
        -> UploadConfirmation
    {
        guard let stored else { return .unconfirmed("remote storage holds no object for it") }
        if let expected = handOff.sha256?.lowercased(), let found = stored.sha256?.lowercased(), found != expected {
            return .otherContent(found)
        }
        if let expected = handOff.expectedSize, let size = stored.size, size != expected {
            return .unconfirmed("the object is \(size) bytes long, not \(expected)")
        }
        guard let size = stored.size ?? handOff.expectedSize else {
            return .unconfirmed("neither the object's size nor the file's is known")
        }
        if stored.sha256 != nil, handOff.sha256 != nil { return .stored(size: size) }
        if let status, (200..<300).contains(status), stored.size != nil { return .stored(size: size) }
        return .unconfirmed("no SHA-256 is kept with the object")
    }

    private func commitUpload(
        _ handOff: HandOffStore.HandOff, of record: AttachmentRecord, size: Int64, _ context: HandOffContext
    ) async {
        machine.noteChanged(record.id)
        let store = store
        let handOffs = context.store
        let timestamp = timestamps.next()
        do {
            let committed = try await db.writeTransaction { tx -> Bool in
                guard try handOffs.remove(id: handOff.id, in: tx) else { return false }
                return try store.markUploaded(id: record.id, size: size, timestamp: timestamp, in: tx)
            }
            discardWrittenBody(of: handOff)
            if committed {
                logger.debug(
                    "uploaded in the background", metadata: ["attachment": "\(record.id)", "bytes": "\(size)"])
                eventCenter.send(.uploaded(attachmentId: record.id, bytes: size))
            }
        } catch {
            logError("committing a background upload failed; it is adopted later", error, id: record.id)
        }
    }

    /// A download the service finished: its body is linked (copied when it is on another volume) into the
    /// attachments folder under a temporary name of its own (``FileName/adoptingName(for:)``), verified and
    /// put in place by the same code as an in-process download; its record goes in that commit.
    private func adoptDownload(
        _ handOff: HandOffStore.HandOff, _ result: BackgroundTransferResult, _ context: HandOffContext
    ) async {
        guard let record = await currentRecord(of: handOff, context), let body = result.bodyFile else { return }
        machine.noteChanged(record.id)
        let worker = makeTransferWorker()
        let files = files
        let present: Bool
        do {
            present = try files.info(atPath: body.path) != nil
        } catch {
            logError("the background service's file for a download cannot be looked at; adopted later", error)
            return
        }
        guard present else {
            await bookHandOffFailure(
                handOff,
                AttachmentError(
                    code: .remoteFailure, message: "the background service's file for the download is gone",
                    attachmentId: record.id, path: body.path), context)
            return
        }
        var staging: String?
        do {
            let localName = try record.localName()
            let adopting = localPath(FileName.adoptingName(for: localName))
            staging = adopting
            try files.removeFile(atPath: adopting)
            // A remote that stores something else than the content (encrypted) makes the content from the body.
            let made: RemoteObjectInfo?
            do {
                made = try await context.remote.contentOfBackgroundDownload(
                    body, for: record.attachment(in: attachmentsDirectory),
                    into: URL(fileURLWithPath: adopting, isDirectory: false))
            } catch let error as AttachmentError where [.integrityMismatch, .keyUnavailable].contains(error.code) {
                // What the download brought is not the content, or waits for a key: booked as the same failure
                // in the process would be. Other errors (the folder out of reach) leave it for a later try.
                try? files.removeFile(atPath: adopting)
                await bookHandOffFailure(handOff, error, context)
                return
            }
            if made == nil {
                do {
                    try files.link(body.path, to: adopting)
                } catch let error as AttachmentError where (error.underlying as? POSIXError)?.code == .EXDEV {
                    try await onBlockingThread {
                        try FileManager.default.copyItem(atPath: body.path, toPath: adopting)
                    }
                }
            }
            let size: Int64
            let sha256: String
            if let made, let writtenSize = made.writtenSize, let writtenSHA256 = made.writtenSHA256 {
                (size, sha256) = (writtenSize, writtenSHA256.lowercased())
            } else {
                (size, sha256) = try await files.digest(ofFileAt: adopting)
            }
            // The response's length and the stored object's hash describe the body, which is the content only
            // when nothing was made from it.
            var remote = RemoteObjectInfo(
                size: made == nil ? result.header("Content-Length").flatMap { Int64($0) } : nil)
            if record.contentHash == nil, made == nil {
                remote =
                    try await context.remote.storedObject(for: record.attachment(in: attachmentsDirectory))
                    ?? remote
            }
            do {
                try TransferWorker.verify(size: size, sha256: sha256, of: record, remote: remote, path: adopting)
            } catch {
                try? files.removeFile(atPath: adopting)
                await bookHandOffFailure(handOff, error, context)
                return
            }
            try files.setAttributes(localFilePolicy.attributes(for: .download), atPath: adopting)
            var entry = DownloadCommitter.Entry(
                record: record, size: size, sha256: sha256, stagingPath: adopting, finalPath: localPath(localName),
                localName: localName, needsFlush: true)
            entry.handOff = (context.store, handOff.id)
            let report = try await downloadCommitter.commit(entry, with: worker)
            if case .completed(let bytes) = report {
                logger.debug(
                    "downloaded in the background", metadata: ["attachment": "\(record.id)", "bytes": "\(bytes)"])
                eventCenter.send(.downloaded(attachmentId: record.id, bytes: bytes))
            }
        } catch {
            if let staging { try? files.removeFile(atPath: staging) }
            logError("adopting a background download failed; it is adopted later", error, id: record.id)
        }
    }

    /// Books a handed-off transfer's failure as the state machine decides it (as for an in-process one), in
    /// the transaction that removes its record: the attachment is queued again under the failure policy.
    private func bookHandOffFailure(
        _ handOff: HandOffStore.HandOff, _ error: any Error, _ context: HandOffContext
    ) async {
        guard let record = await currentRecord(of: handOff, context) else { return }
        let failure = await makeTransferWorker().classify(record, record.attachment(inPath: attachmentsPath), error)
        var generator = SystemRandomNumberGenerator()
        let decision = machine.failureOutcome(failure, of: record, now: wallClock.milliseconds(), using: &generator)
        let store = store
        let handOffs = context.store
        let timestamp = timestamps.next()
        let booked: Bool
        do {
            booked = try await db.writeTransaction { tx -> Bool in
                guard try handOffs.remove(id: handOff.id, in: tx) else { return false }
                if case .interrupted = decision { return false }
                return try store.book(decision, of: record, error: failure.error, timestamp: timestamp, in: tx)
            }
        } catch {
            logError("booking a failed background transfer failed; it is adopted later", error, id: record.id)
            return
        }
        discardWrittenBody(of: handOff)
        logError("a background transfer failed", failure.error, id: record.id)
        if case .interrupted = decision { return }
        report(
            .failed(failure.error, decision, booked: booked), of: record,
            kind: handOff.direction == .upload ? .upload : .download)
    }

    /// A hand-off the service neither runs nor reported: an upload the remote holds already is counted done;
    /// otherwise the record goes and the attachment is queued as it was.
    private func recover(_ handOff: HandOffStore.HandOff, _ context: HandOffContext) async {
        guard let record = await currentRecord(of: handOff, context) else { return }
        if handOff.direction == .upload {
            let stored: RemoteObjectInfo?
            do {
                stored = try await context.remote.storedObject(for: record.attachment(in: attachmentsDirectory))
            } catch {
                logError("looking for a lost background upload failed; it is looked for later", error, id: record.id)
                return
            }
            if stored?.sha256 != nil,
                case .stored(let size) = Self.confirmation(of: handOff, stored: stored, status: nil),
                let size = contentSize(of: record, handOff, stored: size)
            {
                await commitUpload(handOff, of: record, size: size, context)
                return
            }
        }
        let handOffs = context.store
        do {
            _ = try await db.writeTransaction { tx in try handOffs.remove(id: handOff.id, in: tx) }
            discardWrittenBody(of: handOff)
        } catch {
            logError("taking back a lost background transfer failed", error, id: record.id)
        }
    }

    /// Removes the body written for the hand-off's upload, if it has one (its record is gone). When that
    /// fails (the folder out of reach), the next startup removes it.
    private func discardWrittenBody(of handOff: HandOffStore.HandOff) {
        guard let name = handOff.bodyFileName, FileName.isWrittenBody(name) else { return }
        try? files.removeFile(atPath: localPath(name))
        handOffContext?.writtenBodies.withLock { _ = $0.remove(name) }
    }

    /// The content's size of a confirmed upload whose stored object is `stored` bytes: that, unless the body
    /// was written for the transfer (the remote stores the file encrypted, say), when it is the record's size
    /// or its file's. `nil` (logged; adopted later) when neither can be read.
    private func contentSize(of record: AttachmentRecord, _ handOff: HandOffStore.HandOff, stored: Int64) -> Int64? {
        guard let body = handOff.bodyFileName, FileName.isWrittenBody(body) else { return stored }
        if let size = record.size { return size }
        do {
            guard let path = record.localPath, let size = try files.info(atPath: localPath(path))?.size else {
                throw AttachmentError(
                    code: .localFileNotFound,
                    message: "the file of attachment \(String(reflecting: record.id)) is gone",
                    attachmentId: record.id)
            }
            return size
        } catch {
            logError(
                "reading the size of a background upload's file failed; it is confirmed later", error, id: record.id)
            return nil
        }
    }

    /// The hand-off's attachment record as it is now; when there is none (deleted meanwhile), the hand-off
    /// record goes and `nil` is returned.
    private func currentRecord(of handOff: HandOffStore.HandOff, _ context: HandOffContext) async
        -> AttachmentRecord?
    {
        let store = store
        let handOffs = context.store
        do {
            let record = try await db.writeTransaction { tx -> AttachmentRecord? in
                if let record = try store.record(id: handOff.attachmentId, in: tx) { return record }
                _ = try handOffs.remove(id: handOff.id, in: tx)
                return nil
            }
            if record == nil { discardWrittenBody(of: handOff) }
            return record
        } catch {
            logError("reading a handed-off attachment failed", error, id: handOff.attachmentId)
            return nil
        }
    }

    /// The error a result without success stands for, as an in-process transfer's adapter would throw it.
    static func error(of result: BackgroundTransferResult, _ handOff: HandOffStore.HandOff) -> AttachmentError {
        let id = handOff.attachmentId
        guard let status = result.statusCode else {
            return AttachmentError(
                code: .remoteUnavailable,
                message: "a background transfer got no response: \(result.error ?? "no reason given")",
                attachmentId: id)
        }
        let retryAfter = result.header("Retry-After").flatMap { Int64($0) }.map { Duration.seconds($0) }
        let what = "a background \(handOff.direction.rawValue) got HTTP \(status)"
        switch status {
        case 404 where handOff.direction == .download:
            return AttachmentError(code: .remoteNotFound, message: what, attachmentId: id)
        case 401, 403:
            return AttachmentError(code: .accessDenied, message: what, attachmentId: id)
        case 429, 503:
            return AttachmentError(code: .remoteUnavailable, message: what, attachmentId: id, retryAfter: retryAfter)
        case 200..<300:
            return AttachmentError(code: .remoteFailure, message: what + " but no body", attachmentId: id)
        default:
            return AttachmentError(code: .remoteFailure, message: what, attachmentId: id)
        }
    }

    /// Makes sure adoption runs again when the oldest record that is neither running nor reported reaches
    /// the recovery delay (nothing else would wake it).
    private func scheduleRecoveryCheck(
        _ records: [HandOffStore.HandOff], running: Set<String>, results: [BackgroundTransferResult], now: Int64,
        grace: Int64
    ) {
        let reported = Set(results.map(\.id))
        let due = records.filter { !running.contains($0.id) && !reported.contains($0.id) }
            .map { $0.createdAt.addingClamped(grace) }.filter { $0 > now }.min()
        adoption.recoveryCheck?.cancel()
        adoption.recoveryCheck = nil
        guard let due else { return }
        let clock = configuration.clock
        adoption.recoveryCheck = Task {
            do { try await clock.sleep(for: .milliseconds(due - now + 1)) } catch { return }
            await self.adoptHandOffs()
        }
    }
}

extension AttachmentQueue {
    /// Adoption's state on the actor.
    struct AdoptionState {
        /// The adoption running now.
        var task: Task<Void, Never>?
        var again = false
        /// Wakes adoption when a record becomes due for recovery.
        var recoveryCheck: Task<Void, Never>?
    }
}
