import Foundation

/// What a worker needs to hand a transfer to a background service instead of running it.
struct HandOffContext: Sendable {
    let options: BackgroundTransfers
    /// The queue's remote, as one that forms requests ahead of time.
    let remote: any BackgroundTransferForming
    let store: HandOffStore
    /// The ids being handed over in this process right now: recorded, the service's `hand` not returned.
    /// Adoption leaves them alone (the service may not know them yet).
    let handing: LockedValue<Set<String>>
    /// The names of the bodies this queue wrote for hand-offs (encrypted copies) and has not removed yet,
    /// named here before they are written: startup's clean-up leaves them alone, and removes this process's
    /// others (an earlier queue's, whose removal failed).
    let writtenBodies: LockedValue<Set<String>>
    /// Which network the attachment's transfer waits for (the queue's ``NetworkPolicy``).
    let requirement: @Sendable (Attachment) -> NetworkRequirement
}

extension TransferWorker {
    /// Hands the record's transfer to the background service when it suits one (see
    /// ``BackgroundTransfers``): `nil` when it runs in the process instead (that path also reports every
    /// problem with the file, which this one leaves to it).
    ///
    /// The hand-off is recorded before the service gets it, in a transaction conditional on the record's
    /// state; recording and handing run in a task of their own, so a cancellation cannot come between them.
    func handOffIfSuited(_ record: AttachmentRecord, _ attachment: Attachment, _ context: HandOffContext)
        async throws -> TransferReport?
    {
        let options = context.options
        var bodyFileName: String?
        var expectedSize = record.size
        var sha256 = record.contentHash?.lowercased()
        let request: PreparedRequest?
        switch record.state {
        case .queuedUpload:
            guard options.uploads, let name = record.localPath, let path = attachment.localUri,
                let url = local.plainFileURL(filePath: path), let info = try files.info(atPath: url.path),
                info.kind == .regular, info.size >= options.minimumBytes
            else { return nil }
            if let expected = record.size, expected != info.size { return nil }
            if sha256 == nil {
                let digest = try await files.digest(ofFileAt: url.path)
                (expectedSize, sha256) = (digest.size, digest.sha256)
            }
            expectedSize = expectedSize ?? info.size
            let written = FileName.writtenBodyName()
            let writtenURL = directory.appendingPathComponent(written, isDirectory: false)
            context.writtenBodies.withLock { _ = $0.insert(written) }
            let formed: BackgroundUpload?
            do {
                formed = try await context.remote.backgroundUpload(for: attachment, fileURL: url, bodyFile: writtenURL)
            } catch {
                context.writtenBodies.withLock { _ = $0.remove(written) }
                throw error
            }
            guard let upload = formed else {
                context.writtenBodies.withLock { _ = $0.remove(written) }
                return nil
            }
            switch upload.bodyFile.standardizedFileURL.path {
            case url.standardizedFileURL.path:
                context.writtenBodies.withLock { _ = $0.remove(written) }
                bodyFileName = name
            case writtenURL.standardizedFileURL.path:
                // A body written for the transfer (an encrypted copy): the result must show what it stores.
                (expectedSize, sha256) = (upload.storedSize, upload.storedSHA256?.lowercased())
                bodyFileName = written
            default:
                try? files.removeFile(atPath: writtenURL.path)
                context.writtenBodies.withLock { _ = $0.remove(written) }
                throw AttachmentError(
                    code: .invalidConfiguration,
                    message:
                        "\(type(of: context.remote)) formed a background upload that sends \(upload.bodyFile.path), "
                        + "neither the attachment's file nor the body file it was given", attachmentId: record.id,
                    path: upload.bodyFile.path)
            }
            request = upload.request
        case .queuedDownload:
            let staging = FileName.join(directoryPath, FileName.downloadingName(for: try record.localName()))
            guard options.downloads, local.plainFileURL(filePath: staging) != nil else { return nil }
            if options.minimumBytes > 0 {
                guard let size = record.size, size >= options.minimumBytes else { return nil }
            }
            request = try await context.remote.backgroundDownloadRequest(for: attachment)
        case .queuedDelete, .synced, .archived:
            return nil
        }
        guard let request else { return nil }
        let handOff = HandOffStore.HandOff(
            id: UUID().uuidString, attachmentId: record.id,
            direction: record.state == .queuedUpload ? .upload : .download, request: request,
            bodyFileName: bodyFileName, expectedSize: expectedSize, sha256: sha256,
            createdAt: wallClock.milliseconds())
        let unmetered = context.requirement(attachment) == .unmetered
        let report: TransferReport
        do {
            report = try await Task { try await hand(handOff, of: record, unmetered: unmetered, context) }.value
        } catch {
            discardWrittenBody(of: handOff, context)
            throw error
        }
        if case .superseded = report { discardWrittenBody(of: handOff, context) }
        return report
    }

    /// Removes the body written for the hand-off's upload (see
    /// ``BackgroundTransferForming/backgroundUpload(for:fileURL:bodyFile:)``), if it has one; the
    /// attachment's own file is never removed here.
    func discardWrittenBody(of handOff: HandOffStore.HandOff, _ context: HandOffContext) {
        guard let name = handOff.bodyFileName, FileName.isWrittenBody(name) else { return }
        try? files.removeFile(atPath: FileName.join(directoryPath, name))
        context.writtenBodies.withLock { _ = $0.remove(name) }
    }

    private func hand(
        _ handOff: HandOffStore.HandOff, of record: AttachmentRecord, unmetered: Bool, _ context: HandOffContext
    ) async throws -> TransferReport {
        let store = store
        let handOffs = context.store
        // Named as being handed over before the record exists: an adoption that reads the record meanwhile
        // must not take it for one the service lost.
        context.handing.withLock { _ = $0.insert(handOff.id) }
        defer { context.handing.withLock { _ = $0.remove(handOff.id) } }
        let recorded = try await db.writeTransaction { tx in
            guard let current = try store.record(id: record.id, in: tx), current.state == record.state,
                current.localPath == record.localPath
            else { return false }
            return try handOffs.record(handOff, in: tx)
        }
        guard recorded else { return .superseded }
        do {
            try await context.options.service.hand(handOff.transfer(in: directory, requiresUnmeteredNetwork: unmetered))
        } catch {
            // Not handed over: the record goes, and the failure is booked as any other. (Should the service
            // have it after all, its result finds no record and is only acknowledged.)
            _ = try? await db.writeTransaction { tx in try handOffs.remove(id: handOff.id, in: tx) }
            throw error
        }
        logger.debug(
            "handed to the background transfer service",
            metadata: [
                "attachment": "\(record.id)", "transfer": "\(handOff.id)", "direction": "\(handOff.direction)",
            ])
        return .handedOff
    }
}
