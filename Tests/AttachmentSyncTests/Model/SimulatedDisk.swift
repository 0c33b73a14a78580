import Foundation
import GRDB

@testable import AttachmentSync

/// Thrown by every durable operation once a simulated crash has happened.
struct SimulatedCrash: Error, CustomStringConvertible {
    var description: String { "simulated crash" }
}

/// The moment a simulated process dies: after `remaining` more durable operations (file writes, renames,
/// links and removals, database commits, remote calls), every durable operation of that process fails
/// without effect. What is on disk then is what a `kill -9` at that moment would have left, since the
/// operating system keeps what a process had written.
final class CrashSwitch: Sendable {
    private struct State {
        var remaining: Int?
        var crashed = false
        var operations: [String] = []
    }

    private let state = LockedValue(State())

    /// Arms the switch: the process dies at the `count`-th durable operation from now (1 for the next one).
    func arm(after count: Int) {
        state.withLock { $0.remaining = max(1, count) }
    }

    func disarm() {
        state.withLock { $0.remaining = nil }
    }

    var hasCrashed: Bool { state.withLock { $0.crashed } }

    /// Every durable operation let through, for the "nothing outside" invariant.
    var operations: [String] { state.withLock { $0.operations } }

    /// Called before a durable operation: throws when the process is dead (or dies now).
    func check(_ operation: String) throws {
        try state.withLock { state in
            if state.crashed { throw SimulatedCrash() }
            if let remaining = state.remaining {
                if remaining <= 1 {
                    state.crashed = true
                    state.remaining = nil
                    throw SimulatedCrash()
                }
                state.remaining = remaining - 1
            }
            state.operations.append(operation)
        }
    }
}

/// Makes a database's commits go through a crash switch: a commit after the crash is rolled back (GRDB
/// rolls a transaction back when an observer throws from `databaseWillCommit`).
final class CommitGate: TransactionObserver, Sendable {
    let crash: CrashSwitch

    init(_ crash: CrashSwitch) { self.crash = crash }

    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { false }
    func databaseDidChange(with event: DatabaseEvent) {}
    func databaseWillCommit() throws { try crash.check("commit") }
    func databaseDidCommit(_ db: Database) {}
    func databaseDidRollback(_ db: Database) {}
}

/// Takes the entries of a folder out of reach for a while, as a permission change, a failing volume or the
/// protected data of a locked iPhone does: while denied, every file operation on a path inside `folder`
/// fails with `EACCES` (the folder itself can still be looked at, as with a folder whose mode is 000). It
/// outlives simulated processes.
final class AccessSwitch: Sendable {
    let folder: String
    private let denied = LockedValue(false)

    init(folder: String) { self.folder = folder }

    var isDenied: Bool { denied.withLock { $0 } }

    func deny(_ value: Bool) { denied.withLock { $0 = value } }

    /// Throws what the system would when `path` is out of reach now.
    func check(_ path: String) throws {
        guard denied.withLock({ $0 }), path.hasPrefix(folder + "/") else { return }
        throw SystemFileOperations.error(EACCES, "cannot reach", path)
    }
}

/// The local file system as one simulated process sees it: every mutation passes the crash switch, and the
/// volume can behave like APFS or HFS+ (preserving the case and Unicode form of names, but treating names
/// that differ only in them as one).
final class SimulatedDisk: FileOperations, Sendable {
    let crash: CrashSwitch
    let insensitive: Bool
    let access: AccessSwitch?
    private let base = SystemFileOperations()

    init(crash: CrashSwitch, insensitive: Bool, access: AccessSwitch? = nil) {
        self.crash = crash
        self.insensitive = insensitive
        self.access = access
    }

    /// The name two names are equal under on an insensitive volume.
    static func folded(_ name: String) -> String {
        name.precomposedStringWithCanonicalMapping.lowercased()
    }

    /// The real path `path` reaches: on an insensitive volume, an existing entry whose name folds to the
    /// same as the last component's is that entry.
    func resolve(_ path: String) -> String {
        guard insensitive else { return path }
        let url = URL(fileURLWithPath: path)
        let folder = url.deletingLastPathComponent().path
        let name = url.lastPathComponent
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return path }
        if names.contains(name) { return path }
        let wanted = Self.folded(name)
        guard let existing = names.first(where: { Self.folded($0) == wanted }) else { return path }
        return (folder as NSString).appendingPathComponent(existing)
    }

    /// Throws when `paths` are out of reach (see ``AccessSwitch``); a listing of the folder itself is too.
    private func reach(_ paths: String..., listing: Bool = false) throws {
        guard let access else { return }
        for path in paths { try access.check(listing ? path + "/" : path) }
    }

    func info(atPath path: String) throws -> FileInfo? {
        try reach(path)
        return try base.info(atPath: resolve(path))
    }
    func infoFollowingLinks(atPath path: String) throws -> FileInfo? {
        try reach(path)
        return try base.infoFollowingLinks(atPath: resolve(path))
    }
    func contentsOfDirectory(atPath path: String) throws -> [String] {
        try reach(path, listing: true)
        return try base.contentsOfDirectory(atPath: resolve(path))
    }
    func openForReading(atPath path: String) throws -> FileHandle {
        try reach(path)
        return try base.openForReading(atPath: resolve(path))
    }

    func openForWriting(atPath path: String, at offset: Int64?) throws -> any FileWriter {
        try reach(path)
        let real = resolve(path)
        try crash.check("open \(real)")
        return GatedWriter(base: try base.openForWriting(atPath: real, at: offset), crash: crash, path: real)
    }

    func rename(_ source: String, to target: String) throws {
        try reach(source, target)
        let (from, to) = (resolve(source), resolve(target))
        try crash.check("rename \(from) \(to)")
        try base.rename(from, to: to)
    }

    func link(_ source: String, to target: String) throws {
        try reach(source, target)
        let (from, to) = (resolve(source), resolve(target))
        try crash.check("link \(from) \(to)")
        try base.link(from, to: to)
    }

    func removeFile(atPath path: String) throws {
        try reach(path)
        let real = resolve(path)
        try crash.check("remove \(real)")
        try base.removeFile(atPath: real)
    }

    func removeTree(atPath path: String) throws {
        try reach(path)
        let real = resolve(path)
        try crash.check("remove \(real)")
        try base.removeTree(atPath: real)
    }

    func makeDirectory(atPath path: String) throws {
        try reach(path)
        let real = resolve(path)
        if try base.infoFollowingLinks(atPath: real)?.kind == .directory { return }
        try crash.check("mkdir \(real)")
        try base.makeDirectory(atPath: real)
    }

    func synchronizeFile(atPath path: String) throws {
        try reach(path)
        let real = resolve(path)
        try crash.check("flush \(real)")
        try base.synchronizeFile(atPath: real)
    }

    func synchronizeDirectory(atPath path: String) throws {
        try reach(path, listing: true)
        let real = resolve(path)
        try crash.check("flush-folder \(real)")
        try base.synchronizeDirectory(atPath: real)
    }
}

/// A file open for writing whose every write passes the crash switch.
final class GatedWriter: FileWriter {
    let base: any FileWriter
    let crash: CrashSwitch
    let path: String

    init(base: any FileWriter, crash: CrashSwitch, path: String) {
        self.base = base
        self.crash = crash
        self.path = path
    }

    func write(_ data: Data) throws {
        try crash.check("write \(path)")
        try base.write(data)
    }

    func synchronize() throws {
        try crash.check("flush \(path)")
        try base.synchronize()
    }

    func close() { base.close() }
}
