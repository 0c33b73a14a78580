import Foundation

/// A folder of transfers handed to a background service and their results, and the durable writes made in
/// it: the spool shared by the Linux test service's two processes (`SpoolTransferService`), and where
/// `URLSessionTransferService` keeps the results the system reported until the queue acknowledges them.
package struct TransferFolder: Sendable {
    /// The spool folder.
    package let root: URL
    /// Transfers handed over and not finished: `pending/<id>.json`.
    package var pending: URL { root.appendingPathComponent("pending") }
    /// Results not acknowledged: `results/<id>.json`.
    package var results: URL { root.appendingPathComponent("results") }
    /// Downloads' bodies: `bodies/<id>`.
    package var bodies: URL { root.appendingPathComponent("bodies") }

    /// Opens `root`, creating its subfolders.
    package init(_ root: URL) throws {
        self.root = root
        for name in ["pending", "results", "bodies"] {
            let folder = root.appendingPathComponent(name)
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        }
    }

    /// The results in `results/`, by id.
    package func storedResults() throws -> [BackgroundTransferResult] {
        try ids(in: results).sorted().compactMap { id in
            try read(BackgroundTransferResult.self, from: resultURL(id))
        }
    }

    /// Removes the result `id`, its body and what is left of the transfer. The result goes first: a crash
    /// part-way leaves no result naming a body already gone (at worst an orphan body file, which the next
    /// acknowledgement of the id removes).
    package func forget(_ id: String) throws {
        try Self.checkId(id)
        for url in [resultURL(id), bodyURL(id), pendingURL(id)] {
            try remove(url)
        }
    }

    /// Where the transfer `id` waits: `pending/<id>.json`.
    package func pendingURL(_ id: String) -> URL { pending.appendingPathComponent(id + ".json") }
    /// Where the result of `id` is kept: `results/<id>.json`.
    package func resultURL(_ id: String) -> URL { results.appendingPathComponent(id + ".json") }
    /// Where the body of the download `id` is kept: `bodies/<id>`.
    package func bodyURL(_ id: String) -> URL { bodies.appendingPathComponent(id) }

    /// Throws unless `id` can name a file: letters, digits, `-` and `_`, 1 to 128 of them.
    package static func checkId(_ id: String) throws {
        let allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
        guard (1...128).contains(id.count), id.unicodeScalars.allSatisfy(allowed.contains) else {
            throw AttachmentError(
                code: .invalidName, message: "\(String(reflecting: id)) cannot name a spooled transfer", name: id)
        }
    }

    /// The ids of the `.json` files in `folder` (not the temporary files being written there).
    package func ids(in folder: URL) throws -> Set<String> {
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        return Set(names.filter { $0.hasSuffix(".json") && !$0.hasPrefix(".") }.map { String($0.dropLast(5)) })
    }

    /// Writes `value` as JSON to `url` durably: a temporary name, flushed, renamed, the folder flushed.
    package func write(_ value: some Encodable, to url: URL) throws {
        try TransferFolder.checkId(url.deletingPathExtension().lastPathComponent)
        let data = try JSONEncoder().encode(value)
        try install(url) { temporary in try data.write(to: temporary) }
    }

    /// Makes the file `url` durably from what `fill` writes at a temporary name beside it.
    package func install(_ url: URL, _ fill: (URL) throws -> Void) throws {
        let temporary = url.deletingLastPathComponent().appendingPathComponent(
            ".tmp-\(UUID().uuidString)-\(url.lastPathComponent)")
        do {
            try fill(temporary)
            try Self.flush(temporary.path, directory: false)
            guard rename(temporary.path, url.path) == 0 else {
                throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: url.path])
            }
            try Self.flush(url.deletingLastPathComponent().path, directory: true)
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            throw error
        }
    }

    /// The JSON value at `url`, or `nil` when there is none.
    package func read<T: Decodable>(_ type: T.Type, from url: URL) throws -> T? {
        guard let data = FileManager.default.contents(atPath: url.path) else { return nil }
        return try JSONDecoder().decode(type, from: data)
    }

    /// Removes `url` (nothing there is fine) and flushes its folder.
    package func remove(_ url: URL) throws {
        guard FileManager.default.fileExists(atPath: url.path) else { return }
        try FileManager.default.removeItem(at: url)
        try Self.flush(url.deletingLastPathComponent().path, directory: true)
    }

    private static func flush(_ path: String, directory: Bool) throws {
        let descriptor = open(path, directory ? O_RDONLY | O_DIRECTORY : O_RDONLY)
        guard descriptor >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    }
}
