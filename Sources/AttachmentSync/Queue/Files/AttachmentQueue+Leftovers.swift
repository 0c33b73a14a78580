import Foundation
import Logging

/// Startup's clean-up of what a crash left in the attachments directory: temporary files, files of saves
/// that never committed, files no record claims; and what it must leave alone while the queue runs.
extension AttachmentQueue {
    /// Removes what an interrupted call or a crash can leave in the attachments directory, and only that:
    /// - the library's temporary files (`.attachment-sync-…`), except partial downloads (and what the remote
    ///   needs to resume them) of attachments still waiting for their content;
    /// - the file of a save that never committed: `<name>` beside its staging twin `.attachment-sync-save-<name>`
    ///   (a second name of the same file, kept until the commit) when no record refers to `<name>`;
    /// - the local file of an attachment whose record claims none (its content evicted, purged, or downloaded
    ///   but not yet committed when the process stopped);
    /// - files named like attachments the queue generated (UUIDs) that no record refers to.
    ///
    /// Folders, and any other file, are left alone and logged once, so a queue pointed at the wrong folder
    /// deletes nothing of the user's.
    /// `unchanged` holds the folder's current listing and every record, when known (else they are read here).
    ///
    /// `inBackground`, the queue is running, and a file is removed only if nothing the queue did since the
    /// check began can have made it (see ``mayRemoveDuringBackgroundCheck(_:ofCommittedSave:)``): the decision and the
    /// removal happen on the actor with no suspension between them, and no record refers to it just before.
    func removeLeftoverFiles(
        _ unchanged: (listing: [String]?, records: [AttachmentStore.StartupEntry]?), inBackground: Bool
    ) async throws {
        let store = store
        let known = unchanged.records
        let entries = try await db.readTransaction { tx in try known ?? store.startupEntries(in: tx) }
        var names: [String]
        if let listing = unchanged.listing {
            names = listing
        } else if inBackground {
            let files = files
            let directory = attachmentsDirectory.path
            names = try await onBlockingThread { try files.contentsOfDirectory(atPath: directory) }
        } else {
            names = try await localStorage.listDirectory(path: attachmentsDirectory.path)
        }
        let subdirectories = Set(configuration.subdirectories)
        let listed = names
        let plan = await Task.detached {
            Self.leftovers(among: listed, entries: entries, subdirectories: subdirectories)
        }.value
        let plain = localStorage.plainFileURL(filePath: attachmentsDirectory.path) != nil
        // Just before removing, in one read: which of the files about to go a record refers to now (another
        // process of the app committed a save, say), and which saves are in progress in any process (claimed
        // before their files were made, so each save is in one or the other). The queue's own saves and
        // downloads are covered by the check's touched ids too.
        let savingPrefix = FileName.savingName(for: "")
        // The staging names' own files too: a staging name whose file a record claims is what a committed
        // save left behind.
        let stagedFiles = plan.candidates.filter { $0.hasPrefix(savingPrefix) }.map {
            String($0.dropFirst(savingPrefix.count))
        }
        let doomed = Set(plan.twins.map(\.name) + plan.candidates + stagedFiles)
        let claims = claims
        let handOffs = handOffContext?.store
        // The bodies written for handed-off uploads (encrypted copies) count as referenced while their
        // hand-off is recorded.
        let (referencedNow, saveClaims, lease) = try await db.readTransaction { tx in
            (
                try store.referenced(localPaths: doomed, in: tx).union(try handOffs?.writtenBodies(in: tx) ?? []),
                try claims.saveClaims(in: tx), try claims.lease(in: tx)
            )
        }
        var inUse = try await filesInUse(saveClaims: saveClaims, lease: lease)
        inUse.ownWrittenBodies = handOffContext?.writtenBodies.withLock { $0 } ?? []
        /// A staging name left by a save that committed (its file is a record's): only a save of that id
        /// starting again could need the name.
        func ofCommittedSave(_ name: String) -> Bool {
            guard name.hasPrefix(savingPrefix) else { return false }
            let file = String(name.dropFirst(savingPrefix.count))
            return plan.referenced.contains(file) || referencedNow.contains(file)
        }
        var removedTwins: Set<String> = []
        var candidates = plan.candidates
        for (staging, name) in plan.twins where !referencedNow.contains(name) && !inUse.contains(name) {
            // With plain files, only when both names are one file (the twin was made with a hard link);
            // otherwise it is judged like any other file.
            if plain {
                guard let twin = try files.info(atPath: localPath(staging)),
                    let placed = try files.info(atPath: localPath(name)),
                    twin.identity == placed.identity
                else {
                    if Self.isLeftover(name, plan.unclaimed) { candidates.append(name) }
                    continue
                }
            }
            guard try await removeLeftover(name, inBackground: inBackground, ofCommittedSave: false) else { continue }
            removedTwins.insert(name)
            logger.info("removed the file of a save that did not complete", metadata: ["file": "\(name)"])
        }
        var foreign = plan.foreign
        for name in candidates
        where !removedTwins.contains(name) && !referencedNow.contains(name) && !inUse.contains(name) {
            if inBackground { try Task.checkCancellation() }
            if plain, try files.info(atPath: localPath(name))?.kind == .directory {
                foreign.append(name)
                continue
            }
            guard try await removeLeftover(name, inBackground: inBackground, ofCommittedSave: ofCommittedSave(name))
            else { continue }
            logger.info("removed a leftover file", metadata: ["file": "\(name)"])
        }
        if !foreign.isEmpty {
            logger.notice(
                "the attachments directory holds files that are not attachments; they are left alone",
                metadata: ["files": "\(foreign.sorted().prefix(20).joined(separator: ", "))"])
        }
    }

    /// The files other processes of the app (and this one) may be using, which the clean-up leaves alone:
    /// those of saves in progress (claimed, by a process that runs or may run), and the temporary files of
    /// processes that hold claims or the lease. Claims of processes found gone are ended here (their saves
    /// can no longer commit), and so are those older than an hour whose process cannot be asked about.
    private func filesInUse(saveClaims: [ClaimStore.SaveClaim], lease: ClaimStore.LeaseHolder?) async throws
        -> FilesInUse
    {
        let now = wallClock.milliseconds()
        let abandonedAfter: Int64 = 3_600_000
        var inUse = FilesInUse()
        var gone: [ClaimStore.SaveClaim] = []
        var holders: Set<ClaimStore.Holder> = [.current]
        for claim in saveClaims {
            switch claims.mayRun(claim) {
            case true?:
                inUse.names.insert(claim.name)
                holders.insert(claim.holder)
            case nil where now.addingClamped(-claim.startedAt) < abandonedAfter:
                inUse.names.insert(claim.name)
                holders.insert(claim.holder)
            default:
                gone.append(claim)
            }
        }
        if let lease, lease.holder.isAlive != false, lease.expiresAt > now { holders.insert(lease.holder) }
        inUse.temporaryPrefixes = Set(holders.map { FileName.temporaryPrefix(ofProcess: $0.token) })
        if !gone.isEmpty {
            let claims = claims
            let gone = gone
            try await db.writeTransaction { tx in
                for claim in gone { try claims.dropSave(claim.name, of: claim.holder, in: tx) }
            }
            logger.info(
                "ended the claims of saves whose process is gone",
                metadata: ["files": "\(gone.map(\.name).sorted().prefix(20).joined(separator: ", "))"])
        }
        return inUse
    }

    /// What ``filesInUse(saveClaims:lease:)`` found.
    struct FilesInUse {
        /// The local file names of saves in progress.
        var names: Set<String> = []
        /// How the temporary names of running processes begin.
        var temporaryPrefixes: Set<String> = []

        /// The bodies this queue wrote for hand-offs and has not removed: of this process's bodies
        /// (``FileName/writtenBodyName()``), the only ones in use.
        var ownWrittenBodies: Set<String> = []

        /// Whether the file `name` (a local name, its staging twin, or a temporary file) is in use.
        func contains(_ name: String) -> Bool {
            if FileName.isWrittenBody(name), name.hasPrefix(FileName.temporaryPrefixOfThisProcess) {
                return ownWrittenBodies.contains(name)
            }
            return names.contains(FileName.attachmentName(in: name))
                || temporaryPrefixes.contains { name.hasPrefix($0) }
        }
    }

    /// Removes the leftover `name`; `inBackground`, only if
    /// ``mayRemoveDuringBackgroundCheck(_:ofCommittedSave:)`` allows it, checked and removed without a
    /// suspension in between. Returns whether it was removed.
    private func removeLeftover(_ name: String, inBackground: Bool, ofCommittedSave: Bool) async throws -> Bool {
        guard inBackground else {
            try await localStorage.deleteFile(filePath: localPath(name))
            return true
        }
        guard mayRemoveDuringBackgroundCheck(name, ofCommittedSave: ofCommittedSave) else { return false }
        try files.removeFile(atPath: localPath(name))
        return true
    }

    /// Whether startup's background check may remove the file `name` it found to be a leftover: not a
    /// temporary file of this process (in use, perhaps), and not a file of an attachment saved, downloaded
    /// or transferred since the check began (such a file may be newer than the check's read of the records).
    /// The staging name a committed save left (`ofCommittedSave`, a second name of a record's file) is kept
    /// only while a save of that id runs: the attachment's transfers never use it. A name is matched to
    /// attachments by the part of it made from the id, so the test errs on the side of keeping.
    func mayRemoveDuringBackgroundCheck(_ name: String, ofCommittedSave: Bool) -> Bool {
        guard let touched = machine.touchedDuringCheck else { return true }
        if FileName.isWrittenBody(name), name.hasPrefix(FileName.temporaryPrefixOfThisProcess) {
            // Named in the set before it is written, and out of it only once removed (or its hand-off gone).
            return handOffContext?.writtenBodies.withLock { $0.contains(name) } != true
        }
        if name.hasPrefix(FileName.temporaryPrefixOfThisProcess) { return false }
        let stem = FileName.idStem(of: FileName.attachmentName(in: name))
        let busy = ofCommittedSave ? machine.reservedIDs : touched
        return !busy.contains { FileName.safeName($0, keepingDots: false)[...] == stem }
    }

    /// What the clean-up would remove among the folder's `names`, given every record (`entries`): the files of
    /// saves that did not complete (`twins`: a staging name and the name beside it), other leftovers
    /// (`candidates`, which may still turn out to be folders), and the names that are nothing of the
    /// library's (`foreign`). Pure work over every name and record, done off the actor.
    private nonisolated static func leftovers(
        among names: [String], entries: [AttachmentStore.StartupEntry], subdirectories: Set<String>
    ) -> (
        twins: [(staging: String, name: String)], candidates: [String], foreign: [String], unclaimed: Set<String>,
        referenced: Set<String>
    ) {
        let referenced = Set(entries.compactMap(\.localPath))
        let withoutContent = entries.filter { $0.localPath == nil }
        // Partial downloads of attachments still without content are kept, to resume.
        let resumable = Set(
            withoutContent.filter { $0.state == .queuedDownload || $0.state == .synced }.flatMap {
                record -> [String] in
                guard let partial = try? FileName.downloadingName(for: record.localName()) else { return [] }
                // The remote adapter may keep what it needs to resume beside the partial file, and an adapter
                // it wraps what it needs beside that (EncryptedRemoteStorage keeps the ciphertext there).
                let resume = FileName.resumeValidatorName(for: partial)
                return [partial, resume, FileName.resumeValidatorName(for: resume)]
            })
        let unclaimed = Set(withoutContent.compactMap { try? $0.localName() }).subtracting(referenced)
        let present = Set(names)
        let savingPrefix = FileName.savingName(for: "")
        var twins: [(staging: String, name: String)] = []
        for staging in names where staging.hasPrefix(savingPrefix) {
            let name = String(staging.dropFirst(savingPrefix.count))
            if !referenced.contains(name), present.contains(name) { twins.append((staging, name)) }
        }
        let twinNames = Set(twins.map(\.name))
        var candidates: [String] = []
        var foreign: [String] = []
        for name in names where !twinNames.contains(name) {
            if referenced.contains(name) || resumable.contains(name) || subdirectories.contains(name) { continue }
            if isLeftover(name, unclaimed) {
                candidates.append(name)
            } else {
                foreign.append(name)
            }
        }
        return (twins, candidates, foreign, unclaimed, referenced)
    }

    /// Whether a file no record refers to is the library's to remove: a temporary file, the file of an
    /// attachment whose record claims none (`unclaimed`), or one named like a generated attachment.
    private nonisolated static func isLeftover(_ name: String, _ unclaimed: Set<String>) -> Bool {
        name.hasPrefix(FileName.temporaryPrefix) || unclaimed.contains(name)
            || FileName.looksLikeGeneratedAttachment(name)
    }
}
