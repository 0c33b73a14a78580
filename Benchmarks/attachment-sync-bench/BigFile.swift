import Foundation

/// A large file of deterministic content, written and checked one chunk at a time so that neither ever
/// holds more than one chunk in memory.
enum BigFile {
    /// The chunk size: 1 MiB.
    static let chunkSize = 1 << 20

    /// The bytes of chunk number `index` (the last chunk may be shorter).
    static func chunk(_ index: Int, size: Int64) -> Data {
        let start = Int64(index) * Int64(chunkSize)
        return content(index: 7_000_000 + index, size: Int(min(Int64(chunkSize), size - start)))
    }

    /// Writes `size` bytes to `url`, replacing any file there.
    static func create(at url: URL, size: Int64) throws {
        guard FileManager.default.createFile(atPath: url.path, contents: nil) else {
            throw BenchmarkFailure("cannot create \(url.path)")
        }
        let handle = try FileHandle(forWritingTo: url)
        defer { try? handle.close() }
        var index = 0
        while Int64(index) * Int64(chunkSize) < size {
            try autoreleasepool { try handle.write(contentsOf: chunk(index, size: size)) }
            index += 1
        }
    }

    /// Throws a ``BenchmarkFailure`` unless the file at `url` holds exactly the bytes ``create(at:size:)``
    /// writes.
    static func verify(at url: URL, size: Int64, what: String) throws {
        guard let handle = try? FileHandle(forReadingFrom: url) else {
            throw BenchmarkFailure("\(what) is missing (\(url.path))")
        }
        defer { try? handle.close() }
        var index = 0
        while Int64(index) * Int64(chunkSize) < size {
            let matches = try autoreleasepool {
                try handle.read(upToCount: chunkSize) == chunk(index, size: size)
            }
            guard matches else { throw BenchmarkFailure("\(what) differs in its MiB number \(index)") }
            index += 1
        }
        guard try handle.read(upToCount: 1)?.isEmpty ?? true else {
            throw BenchmarkFailure("\(what) is longer than \(size) bytes")
        }
    }
}

#if !canImport(ObjectiveC)
    /// Runs `body`; Apple platforms drain autoreleased objects here, Linux has none.
    func autoreleasepool<T>(invoking body: () throws -> T) rethrows -> T {
        try body()
    }
#endif
