import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Writes `data` to a new file at `path` and flushes it to the disk (`open`, `write`, `fsync`, `close`).
func writeDurably(_ data: Data, to path: String) throws {
    let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    guard descriptor >= 0 else { throw BenchmarkFailure("cannot create \(path)") }
    defer { close(descriptor) }
    let written = data.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
    guard written == data.count, fsync(descriptor) == 0 else { throw BenchmarkFailure("cannot write \(path)") }
}

/// Flushes an existing file to the disk (`open`, `fsync`, `close`).
func flushFile(atPath path: String) throws {
    let descriptor = open(path, O_RDONLY)
    guard descriptor >= 0 else { throw BenchmarkFailure("cannot open \(path)") }
    defer { close(descriptor) }
    guard fsync(descriptor) == 0 else { throw BenchmarkFailure("cannot flush \(path)") }
}

/// Renames a file with `rename(2)`, replacing the target.
func renameFile(_ source: String, to target: String) throws {
    guard rename(source, target) == 0 else { throw BenchmarkFailure("cannot rename \(source) to \(target)") }
}
