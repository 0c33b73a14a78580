import Foundation
import Testing

/// The Architecture article's table of parts names every file of the queue, so a newcomer who reads it
/// finds each file's part, and a file added without its row fails here.
@Suite("Architecture article")
struct ArchitectureArticleTests {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test("every file under Sources/AttachmentSync/Queue is named in the article's table")
    func everyQueueFileIsInTheTable() throws {
        let article = try String(
            contentsOf: Self.root.appendingPathComponent("Sources/AttachmentSync/Documentation.docc/Architecture.md"),
            encoding: .utf8)
        let table = article.split(separator: "\n").filter { $0.hasPrefix("| ") }.joined(separator: "\n")
        let queue = Self.root.appendingPathComponent("Sources/AttachmentSync/Queue")
        let files = try #require(FileManager.default.enumerator(atPath: queue.path)).compactMap { $0 as? String }
            .filter { $0.hasSuffix(".swift") }.map { ($0 as NSString).lastPathComponent }
        #expect(files.count > 30, "the queue's files were found: \(files.count)")
        let missing = files.filter { !table.contains("`\($0)`") && !table.contains("/\($0)`") }.sorted()
        #expect(missing == [], "files under Queue/ without a row in Architecture.md")
    }
}
