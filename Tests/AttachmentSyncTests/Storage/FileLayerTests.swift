import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// The one file layer core and the S3 module share: ranged chunked reads, sizes, modification times.
@Suite("File layer", .cleansUp)
struct FileLayerTests {
    @Test("readChunks reads exactly the range asked for, in chunks, and fails on a file that ends early")
    func rangedReads() async throws {
        let folder = try TemporaryDirectory()
        let path = folder.path("f.bin")
        let bytes = Data((0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try bytes.write(to: URL(fileURLWithPath: path))
        let files = SystemFileOperations()
        #expect(try files.size(ofFileAt: path) == 10_000)

        var chunks: [Data] = []
        let read = try await files.readChunks(atPath: path, offset: 1_000, length: 2_500, chunkSize: 1_024) {
            chunks.append($0)
        }
        #expect(read == 2_500)
        #expect(chunks.map(\.count) == [1_024, 1_024, 452])
        #expect(Data(chunks.joined()) == bytes[1_000..<3_500])

        var whole = Data()
        #expect(try await files.readChunks(atPath: path, offset: 9_000) { whole.append($0) } == 1_000)
        #expect(whole == bytes[9_000...])

        await #expect(throws: AttachmentError.self) {
            try await files.readChunks(atPath: path, offset: 9_000, length: 2_000) { _ in }
        }
        let missing = folder.path("none")
        #expect(throws: AttachmentError.self) { try files.size(ofFileAt: missing) }
        let digest = try await files.digest(ofFileAt: path)
        #expect(digest.size == 10_000)
        #expect(digest.sha256 == FileStreaming.sha256(bytes))
        let modified = try #require(files.infoFollowingLinks(atPath: path)?.modificationTime)
        #expect(abs(modified - Date().timeIntervalSince1970) < 3_600, "seconds since 1970, not zero")
    }
}
