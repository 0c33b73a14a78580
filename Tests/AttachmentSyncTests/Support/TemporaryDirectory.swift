import Foundation

/// A fresh folder under the system's temporary directory, removed when the value is released.
final class TemporaryDirectory: Sendable {
    let url: URL

    init(_ label: String = #function) throws {
        let safeLabel = label.filter { $0.isLetter || $0.isNumber }
        url = FileManager.default.temporaryDirectory
            .appendingPathComponent("AttachmentSyncTests-\(safeLabel)-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    var path: String { url.path }

    func path(_ component: String) -> String { url.appendingPathComponent(component).path }

    deinit {
        try? FileManager.default.removeItem(at: url)
    }
}
