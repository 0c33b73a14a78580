import AttachmentSync
import Foundation

/// Local storage for tests that changes one or two operations of a real `FileManagerStorageAdapter`: a
/// conforming type declares `base` and the operations it intercepts; every other one goes to `base`, except
/// `plainFileURL`, which keeps the protocol's default (`nil`: the queue hands the storage data) unless the
/// type forwards it too.
protocol ForwardingLocalStorage: LocalStorageAdapter {
    var base: FileManagerStorageAdapter { get }
}

extension ForwardingLocalStorage {
    func saveFile(filePath: String, data: Data) async throws -> Int64 {
        try await base.saveFile(filePath: filePath, data: data)
    }
    func readFile(filePath: String, mediaType: String?) async throws -> Data {
        try await base.readFile(filePath: filePath, mediaType: mediaType)
    }
    func deleteFile(filePath: String) async throws { try await base.deleteFile(filePath: filePath) }
    func fileExists(filePath: String) async throws -> Bool { try await base.fileExists(filePath: filePath) }
    func fileSize(filePath: String) async throws -> Int64? { try await base.fileSize(filePath: filePath) }
    func makeDir(path: String) async throws { try await base.makeDir(path: path) }
    func rmDir(path: String) async throws { try await base.rmDir(path: path) }
    func copyFile(sourcePath: String, targetPath: String) async throws {
        try await base.copyFile(sourcePath: sourcePath, targetPath: targetPath)
    }
    func moveFile(sourcePath: String, targetPath: String) async throws {
        try await base.moveFile(sourcePath: sourcePath, targetPath: targetPath)
    }
    func listDirectory(path: String) async throws -> [String] { try await base.listDirectory(path: path) }
}
