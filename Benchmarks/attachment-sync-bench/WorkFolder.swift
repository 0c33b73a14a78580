import Foundation

/// A fresh folder under the system's temporary directory, removed by ``remove()``.
struct WorkFolder: Sendable {
    /// The folder.
    let url: URL

    /// Creates `attachment-sync-bench-<label>-<uuid>` in the temporary directory.
    init(label: String) throws {
        url = FileManager.default.temporaryDirectory
            .appendingPathComponent("attachment-sync-bench-\(label)-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    /// Adopts an existing folder (the P3 child process works in one its parent made).
    init(existing url: URL) {
        self.url = url
    }

    /// A path inside the folder.
    func path(_ name: String) -> String {
        url.appendingPathComponent(name).path
    }

    /// A URL inside the folder.
    func file(_ name: String) -> URL {
        url.appendingPathComponent(name)
    }

    /// Creates a subfolder and returns its URL.
    func makeFolder(_ name: String) throws -> URL {
        let folder = url.appendingPathComponent(name, isDirectory: true)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return folder
    }

    /// Deletes the folder and everything in it; errors are ignored (it is in the temporary directory).
    func remove() {
        try? FileManager.default.removeItem(at: url)
    }
}

/// Runs `body` with a fresh ``WorkFolder`` and removes the folder afterwards, whether `body` throws or not.
func withWorkFolder<T: Sendable>(
    _ label: String,
    _ body: (WorkFolder) async throws -> T
) async throws -> T {
    let folder = try WorkFolder(label: label)
    do {
        let result = try await body(folder)
        folder.remove()
        return result
    } catch {
        folder.remove()
        throw error
    }
}
