import Testing

@testable import AttachmentSyncHTTP

@Suite("HTTP header fields")
struct HTTPHeaderFieldsTests {
    @Test("replaceOrAdd keeps the first field's place with the new value, drops the others, or appends")
    func replaceOrAdd() {
        var fields: HTTPHeaderFields = [
            (name: "a", value: "1"), (name: "Content-Type", value: "x"), (name: "b", value: "2"),
            (name: "content-type", value: "y"),
        ]
        fields.replaceOrAdd(name: "CONTENT-TYPE", value: "z")
        #expect(fields.map { "\($0.name)=\($0.value)" } == ["a=1", "Content-Type=z", "b=2"])
        fields.replaceOrAdd(name: "depth", value: "1")
        #expect(fields.map { "\($0.name)=\($0.value)" } == ["a=1", "Content-Type=z", "b=2", "depth=1"])
        #expect(fields.first(name: "DEPTH") == "1")
        #expect(fields["content-type"] == ["z"])
    }
}
