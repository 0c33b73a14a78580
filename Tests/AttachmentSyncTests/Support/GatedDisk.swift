import Dispatch
import Foundation
import TestSupport

@testable import AttachmentSync

/// The system's file operations, except that the first call at one point (a listing of one folder, or a
/// flush of several files at once) waits until the test opens the gate; it also logs how many files each
/// flush of several covered.
final class GatedDisk: ForwardingDisk, Sendable {
    /// Where the disk waits.
    enum Point: Sendable {
        case firstListing(of: String)
        case firstFlushOfFiles
    }

    let point: Point
    let base = SystemFileOperations()
    let gate = DispatchSemaphore(value: 0)
    /// Yields once the held call has begun.
    let reached = AsyncStream.makeStream(of: Void.self)
    /// How many files each `synchronizeFiles` call covered, in order.
    let groups = LockedValue<[Int]>([])
    private let held = LockedValue(false)

    init(holding point: Point) { self.point = point }

    /// Waits at the gate the first time only; bounded, so a test that never opens it fails instead of hanging.
    private func holdOnce() throws {
        guard
            held.withLock({ held in
                defer { held = true }
                return !held
            })
        else { return }
        reached.continuation.yield()
        if gate.wait(timeout: .now() + 20) == .timedOut { throw HarnessError("the gate never opened") }
    }

    func contentsOfDirectory(atPath path: String) throws -> [String] {
        if case .firstListing(let folder) = point, path == folder { try holdOnce() }
        return try base.contentsOfDirectory(atPath: path)
    }
    func synchronizeFiles(atPaths paths: [String]) throws {
        groups.withLock { $0.append(paths.count) }
        if case .firstFlushOfFiles = point { try holdOnce() }
        try base.synchronizeFiles(atPaths: paths)
    }
}
