import Foundation
import Logging

/// The transfer lease: several processes of one app share the table and the folder, one of them transfers.
///
/// A queue wants the lease while it syncs, while a ``AttachmentQueue/syncNow()`` or a repair runs, and while
/// startup's check of files runs. It holds it by a row in the claims table (``ClaimStore``), never by a file
/// lock, and gives it up when it no longer wants it. No timer keeps it: the queue renews it whenever it is
/// about to start transfers and a third of ``AttachmentQueue/Configuration/leaseDuration`` has passed, and
/// a queue that wants it takes it over at its next pass once the holder is gone (killed: at once where this
/// process may ask whether it runs, as on Linux and macOS; else when its lease has run out, as for a
/// suspended iOS app) or has let it run out while idle (see ``ClaimStore/takeLease(for:now:expiresAt:longest:in:)``).
/// A holder that finds another process took the lease over interrupts its own transfers (the other
/// process runs them; an upload both made is the same content, so it meets no conflict).
extension AttachmentQueue {
    /// Takes the lease, or renews it; returns whether this queue holds it now. A queue that gains it after
    /// another process held it first runs the startup check it put off.
    @discardableResult
    func takeLease() async -> Bool {
        let claims = claims
        let duration = configuration.leaseDuration.clampedMilliseconds
        let now = wallClock.milliseconds()
        let other: ClaimStore.LeaseHolder?
        do {
            other = try await db.writeTransaction { tx in
                try claims.takeLease(
                    for: .current, now: now, expiresAt: now.addingClamped(duration), longest: duration, in: tx)
            }
        } catch {
            logError("the transfer lease could not be renewed", error)
            if let expiresAt = leaseExpiresAt, wallClock.milliseconds() >= expiresAt { leaseLost(to: nil) }
            return leaseExpiresAt != nil
        }
        if let other {
            leaseLost(to: other)
            return false
        }
        let gained = leaseExpiresAt == nil
        leaseExpiresAt = now.addingClamped(duration)
        if gained {
            logger.debug("took the transfer lease")
            if startupCheckDeferred {
                startupCheckDeferred = false
                do {
                    try await runDeferredStartupCheck()
                } catch {
                    logError("startup's check of files failed after taking over; the next startup checks again", error)
                }
            }
            perform(machine.leaseChanged(held: true))
            trigger()
        }
        return true
    }

    /// Whether this queue holds a lease that has not run out, renewing it first when it is about to (a
    /// process back from a suspension finds it run out, perhaps taken).
    func holdsCurrentLease() async -> Bool {
        guard let expiresAt = leaseExpiresAt else { return false }
        let margin = configuration.leaseDuration.clampedMilliseconds / 3
        if wallClock.milliseconds() >= expiresAt.addingClamped(-margin) { return await takeLease() }
        return true
    }

    /// Another process holds the lease (or this one could not renew it in time): transfers stop here.
    private func leaseLost(to other: ClaimStore.LeaseHolder?) {
        guard leaseExpiresAt != nil || machine.holdsLease else { return }
        let wasHeld = leaseExpiresAt != nil
        leaseExpiresAt = nil
        perform(machine.leaseChanged(held: false))
        if wasHeld {
            logger.notice(
                "another process of the app took over the transfers",
                metadata: ["holder": "\(other.map { "\($0.holder)" } ?? "unknown")"])
        } else if let other {
            logger.debug("another process of the app runs the transfers", metadata: ["holder": "\(other.holder)"])
        }
    }

    /// Whether this queue has a use for the lease: it syncs, a ``syncNow()`` or a repair runs, or startup's
    /// check does.
    var wantsLease: Bool {
        (session != nil || leaseUsers > 0 || backgroundFileCheckRunning) && !machine.isClosed
    }

    /// Gives the lease up (another process may take it at once).
    func releaseLease() async {
        guard leaseExpiresAt != nil else { return }
        leaseExpiresAt = nil
        perform(machine.leaseChanged(held: false))
        let claims = claims
        do {
            try await db.writeTransaction { tx in try claims.releaseLease(of: .current, in: tx) }
            logger.debug("gave the transfer lease up")
        } catch {
            logError("the transfer lease could not be given up; it runs out by itself", error)
        }
    }

    /// Gives the lease up unless the queue still has a use for it.
    func releaseLeaseIfUnwanted() async {
        if !wantsLease { await releaseLease() }
    }

    /// Runs `body` as an ``operation(_:)`` with the lease held (repairs change what transfers work on).
    ///
    /// - Throws: ``AttachmentError/Code-swift.struct/directoryInUse`` when another process holds it.
    func withLease<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        try await operation {
            leaseUsers += 1
            do {
                guard await takeLease() else {
                    let holder = try? await db.readTransaction { [claims] tx in try claims.lease(in: tx) }
                    throw AttachmentError(
                        code: .directoryInUse,
                        message: "another process of the app (\(holder.map { "\($0.holder)" } ?? "unknown")) holds "
                            + "the transfer lease of \(attachmentsPath); nothing was changed",
                        path: attachmentsPath)
                }
                let result = try await body()
                leaseUsers -= 1
                await releaseLeaseIfUnwanted()
                return result
            } catch {
                leaseUsers -= 1
                await releaseLeaseIfUnwanted()
                throw error
            }
        }
    }

    // MARK: - Suspension

    /// Gets the queue ready for the app's suspension: interrupts transfers (they resume later, from where
    /// they were where the remote allows) and gives the transfer lease up, so that the app's extensions can
    /// transfer while the app is suspended. Nothing of the queue is held while suspended: no file lock, no
    /// database transaction. Saving and deleting still work.
    ///
    /// Call it when the app is about to be suspended: when the scene phase becomes `.background` (SwiftUI's
    /// `scenePhase`), or, when the app asked for background time with `beginBackgroundTask` to let
    /// transfers go on for a while, when that time ends (its expiration handler) or its work is done. Then
    /// call ``resume()`` when the app is active again.
    ///
    /// ```swift
    /// .onChange(of: scenePhase) { _, phase in
    ///     Task {
    ///         if phase == .background { await queue.suspend() }
    ///         if phase == .active { try await queue.resume() }
    ///     }
    /// }
    /// ```
    ///
    /// A suspended app that did not call it loses the lease when it runs out
    /// (``Configuration/leaseDuration``); calling it is what lets another process take over at once.
    public func suspend() async {
        guard syncingBeforeSuspension == nil, !machine.isClosed else { return }
        syncingBeforeSuspension = session != nil
        await stopSync()
        await releaseLease()
        logger.debug("suspended")
    }

    /// Undoes ``suspend()``: sync starts again if it was on. Does nothing when the queue is not suspended.
    ///
    /// - Throws: The errors of ``startSync()``.
    public func resume() async throws {
        guard let wasSyncing = syncingBeforeSuspension else { return }
        syncingBeforeSuspension = nil
        logger.debug("resumed")
        if wasSyncing { try await startSync() }
    }
}
