import AttachmentSync
import Foundation
import Testing

@testable import AttachmentSync

/// The folder remote's listing on a real folder: pages, escaped names mapped back, its own files left out.
@Suite("FileSystemRemoteStorage listing")
struct FileSystemRemoteStorageListingTests {
    @Test("2,500 files come in three pages, in order, with the stored hashes and temporary files left out")
    func pages() async throws {
        let folder = try TemporaryDirectory()
        let remote = FileSystemRemoteStorage(directory: folder.path("remote"))
        #expect(try await remote.allFiles().isEmpty, "a folder never uploaded to lists nothing")
        for index in 0..<2_500 {
            let data = Data(repeating: UInt8(index % 251), count: index % 7)
            try await remote.uploadFile(
                data: data,
                attachment: Attachment(
                    id: "\(index)", filename: String(format: "f%04d.bin", index), state: .synced,
                    contentHash: index % 2 == 0 ? FileStreaming.sha256(data) : nil))
        }
        try FileManager.default.createDirectory(atPath: folder.path("remote/sub"), withIntermediateDirectories: true)
        try Data().write(to: URL(fileURLWithPath: folder.path("remote/.attachment-sync-tmp-x")))
        var pages: [RemoteFileListing] = []
        var continuation: String?
        repeat {
            let page = try await remote.listFiles(after: continuation)
            pages.append(page)
            continuation = page.next
        } while continuation != nil && pages.count < 10
        #expect(pages.map(\.files.count) == [1_000, 1_000, 500])
        let names = pages.flatMap(\.files).map(\.storedName)
        #expect(names == (0..<2_500).map { String(format: "f%04d.bin", $0) })
        #expect(pages.flatMap(\.files).map(\.size) == (0..<2_500).map { Int64($0 % 7) })
    }

    @Test("escaped names map back to their filenames; shortened ones do not, and are still listed")
    func namesMapBack() async throws {
        let folder = try TemporaryDirectory()
        let remote = FileSystemRemoteStorage(directory: folder.path("remote"))
        let long = String(repeating: "Ü", count: 90) + ".jpg"
        for name in ["Photo é.JPG", "100%.txt", "a~b", long] {
            try await remote.uploadFile(
                data: Data(name.utf8), attachment: Attachment(id: "x", filename: name, state: .synced))
        }
        let listed = try await remote.allFiles()
        #expect(listed.count == 4)
        for file in listed {
            if let filename = file.filename {
                #expect(try remote.storedName(forFilename: filename) == file.storedName)
                #expect(file.size == Int64(filename.utf8.count))
            } else {
                #expect(file.storedName == (try remote.storedName(forFilename: long)))
            }
        }
        #expect(Set(listed.compactMap(\.filename)) == ["Photo é.JPG", "100%.txt", "a~b"])
        #expect(FileName.unescapedSafeName("^photo", keepingDots: true) == "Photo")
        #expect(FileName.unescapedSafeName("^P", keepingDots: true) == nil, "not something safeName makes")
        #expect(FileName.unescapedSafeName("%zz", keepingDots: true) == nil)
        #expect(FileName.unescapedSafeName("%41", keepingDots: true) == nil, "A is escaped as ^a, never %41")
        #expect(FileName.unescapedSafeName("%c3%a9", keepingDots: true) == "é")
        #expect(FileName.unescapedSafeName("%ff", keepingDots: true) == nil, "not UTF-8")
        #expect(FileName.unescapedSafeName("a%c3", keepingDots: true) == nil, "a sequence cut short")
        #expect(FileName.unescapedSafeName("%ed%a0%80", keepingDots: true) == nil, "a surrogate is no scalar")
    }
}
