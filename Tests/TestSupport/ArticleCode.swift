import Foundation

/// The `swift` code blocks of a DocC article, for tests that compile an article's code and check that every
/// block of the article is in the test's own source (indentation aside), so the article cannot drift.
package enum ArticleCode {
    /// The text of each ```` ```swift ```` block of the article at `url`, in order.
    package static func blocks(ofArticleAt url: URL) throws -> [String] {
        let article = try String(contentsOf: url, encoding: .utf8)
        return article.components(separatedBy: "```swift\n").dropFirst().map {
            $0.components(separatedBy: "```").first ?? ""
        }
    }

    /// The blocks of the article at `url` that the source file at `sourcePath` does not contain.
    package static func blocksMissing(ofArticleAt url: URL, fromSourceAt sourcePath: String) throws -> [String] {
        let source = normalized(try String(contentsOf: URL(fileURLWithPath: sourcePath), encoding: .utf8))
        return try blocks(ofArticleAt: url).filter { !source.contains(normalized($0)) }
    }

    /// Lines without their leading spaces, empty lines dropped.
    package static func normalized(_ text: String) -> String {
        text.split(separator: "\n").map { $0.drop { $0 == " " } }.filter { !$0.isEmpty }.joined(separator: "\n")
    }
}
