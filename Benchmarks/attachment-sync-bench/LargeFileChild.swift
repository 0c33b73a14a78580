import AttachmentSync
import Foundation

/// The P3 child process (`attachment-sync-bench __p3-child <mode> <folder> <bytes>`): runs one side of
/// P3 in a fresh process, so that its peak resident set size is its own, and prints it on one line.
///
/// - `project`: writes the big file, saves it with `saveFile(fileURL:…, moveFile: true)` and a checklist
///   row referring to it, waits for the upload to a ``FileSystemRemoteStorage`` folder, evicts it (clears
///   the row's reference so the record is archived, then `expireCache()` with `archivedCacheLimit` 0), refers
///   to it again and waits for the download; checks the remote copy and the downloaded file byte for byte.
/// - `baseline`: writes the same file and copies it with `FileManager.copyItem`, then checks the copy.
enum LargeFileChild {
    /// The command-line word that selects the child.
    static let command = "__p3-child"

    /// What the child prints: `P3-RESULT peak=<bytes> <phase>=<seconds> …`.
    static let resultPrefix = "P3-RESULT"

    /// Runs the child with the arguments after ``command``; returns the process's exit status.
    static func main(_ arguments: [String]) async -> Int32 {
        guard arguments.count == 3, let size = Int64(arguments[2]), size > 0 else {
            printError("usage: attachment-sync-bench \(command) project|baseline <folder> <bytes>")
            return 2
        }
        let folder = WorkFolder(existing: URL(fileURLWithPath: arguments[1], isDirectory: true))
        do {
            let phases: [(String, Duration)]
            switch arguments[0] {
            case "project": phases = try await runProject(in: folder, size: size)
            case "baseline": phases = try runBaseline(in: folder, size: size)
            default:
                printError("unknown mode \(arguments[0])")
                return 2
            }
            guard let peak = Memory.peakResidentBytes() else {
                printError("cannot read the peak resident set size")
                return 1
            }
            let timings = phases.map { "\($0.0)=" + String(format: "%.3f", $0.1.seconds) }
            print(([resultPrefix, "peak=\(peak)"] + timings).joined(separator: " "))
            return 0
        } catch {
            printError("P3 \(arguments[0]) failed: \(error)")
            return 1
        }
    }

    /// The baseline: create, copy, check.
    private static func runBaseline(in folder: WorkFolder, size: Int64) throws -> [(String, Duration)] {
        let clock = ContinuousClock()
        let source = folder.file("source.bin")
        let copy = folder.file("copy.bin")
        var start = clock.now
        try BigFile.create(at: source, size: size)
        let created = clock.now - start
        start = clock.now
        try FileManager.default.copyItem(at: source, to: copy)
        let copied = clock.now - start
        try BigFile.verify(at: copy, size: size, what: "the copy")
        return [("create", created), ("copy", copied)]
    }

    /// The project: create, save, upload, evict, download, check.
    private static func runProject(in folder: WorkFolder, size: Int64) async throws -> [(String, Duration)] {
        let clock = ContinuousClock()
        let source = folder.file("source.bin")
        var start = clock.now
        try BigFile.create(at: source, size: size)
        let created = clock.now - start

        let remoteFolder = try folder.makeFolder("remote")
        let remote = FileSystemRemoteStorage(directory: remoteFolder)
        return try await withDevice(
            in: folder, remote: remote, watchFileExtension: "bin", archivedCacheLimit: 0
        ) { device in
            try await device.queue.startSync()

            start = clock.now
            let attachment = try await device.queue.saveFile(
                fileURL: source, mediaType: "application/octet-stream", fileExtension: "bin", moveFile: true
            ) { tx, attachment in
                try tx.execute(
                    sql:
                        "INSERT INTO checklists (id, description, completed, photo_id) VALUES ('big', 'a big file', 0, ?)",
                    arguments: [attachment.id])
            }
            let saved = clock.now - start
            start = clock.now
            try await device.waitForState(attachment.id, .synced, seconds: 900)
            let uploaded = clock.now - start
            try BigFile.verify(
                at: remoteFolder.appendingPathComponent(attachment.filename), size: size, what: "the remote copy")

            start = clock.now
            try await device.db.execute(sql: "UPDATE checklists SET photo_id = NULL WHERE id = 'big'")
            try await waitUntilNotSynced(device, id: attachment.id)
            try await device.queue.expireCache()
            try await device.waitForState(attachment.id, nil, seconds: 60)
            let evicted = clock.now - start
            if let localUri = attachment.localUri, FileManager.default.fileExists(atPath: localUri) {
                throw BenchmarkFailure("the evicted file is still at \(localUri)")
            }

            start = clock.now
            try await device.db.execute(
                sql: "UPDATE checklists SET photo_id = ? WHERE id = 'big'", parameters: [attachment.id])
            try await device.waitForState(attachment.id, .synced, seconds: 900)
            let downloaded = clock.now - start
            guard let local = try await device.queue.attachment(id: attachment.id), let localUri = local.localUri,
                local.hasSynced, local.size == size
            else { throw BenchmarkFailure("the downloaded record is incomplete") }
            try BigFile.verify(at: URL(fileURLWithPath: localUri), size: size, what: "the downloaded file")
            return [
                ("create", created), ("save", saved), ("upload", uploaded), ("evict", evicted),
                ("download", downloaded),
            ]
        }
    }

    /// Waits until the record has left `synced` (archived, or already evicted by a pass).
    private static func waitUntilNotSynced(_ device: Device, id: String) async throws {
        let left = try await withDeadline(seconds: 60) { () async throws -> Bool in
            let states = try device.db.watch(sql: "SELECT state FROM attachments WHERE id = ?", parameters: [id]) {
                try $0.getInt(name: "state")
            }
            var iterator = states.makeAsyncIterator()
            try await skip(&iterator, until: { $0 != [AttachmentState.synced.rawValue] })
            return true
        }
        guard left == true else { throw BenchmarkFailure("\(id) was not archived within 60 s") }
    }
}
