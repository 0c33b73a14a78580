import Foundation

#if canImport(FoundationXML)
    import FoundationXML
#endif

/// The little XML S3 speaks: error bodies, the upload id of a new multipart upload, listed parts, uploads and
/// objects, and the body of CompleteMultipartUpload.
enum S3XML {
    /// An element with its text and children; namespaces are ignored.
    final class Element {
        let name: String
        var text = ""
        var children: [Element] = []

        init(name: String) {
            self.name = name
        }

        /// The first child named `name`.
        func child(_ name: String) -> Element? {
            children.first { $0.name == name }
        }

        /// All children named `name`.
        func children(_ name: String) -> [Element] {
            children.filter { $0.name == name }
        }

        /// The trimmed text of the first child named `name`.
        func value(_ name: String) -> String? {
            child(name).map { $0.text.trimmingCharacters(in: .whitespacesAndNewlines) }
        }
    }

    /// Parses a document into its root element, or `nil` when it is not XML.
    static func parse(_ data: Data) -> Element? {
        let delegate = TreeBuilder()
        let parser = XMLParser(data: data)
        parser.delegate = delegate
        parser.shouldProcessNamespaces = true
        guard parser.parse() else { return nil }
        return delegate.root
    }

    /// The `Code` and `Message` of an S3 `<Error>` body, or `nil` when the body is not one.
    static func parseError(_ body: Data) -> (code: String?, message: String?)? {
        guard !body.isEmpty, let root = parse(body), root.name == "Error" else { return nil }
        return (root.value("Code"), root.value("Message"))
    }

    /// Escapes text for an element's content.
    static func escape(_ text: String) -> String {
        var result = ""
        for character in text {
            switch character {
            case "&": result += "&amp;"
            case "<": result += "&lt;"
            case ">": result += "&gt;"
            case "\"": result += "&quot;"
            case "'": result += "&apos;"
            default: result.append(character)
            }
        }
        return result
    }

    /// Builds the tree. Used on one thread, inside `parse`, and dropped afterwards.
    private final class TreeBuilder: NSObject, XMLParserDelegate {
        var root: Element?
        private var stack: [Element] = []

        func parser(
            _ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?,
            qualifiedName qName: String?, attributes attributeDict: [String: String] = [:]
        ) {
            let element = Element(name: elementName)
            if let parent = stack.last {
                parent.children.append(element)
            } else if root == nil {
                root = element
            }
            stack.append(element)
        }

        func parser(
            _ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName qName: String?
        ) {
            _ = stack.popLast()
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            stack.last?.text += string
        }
    }
}
