import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A file descriptor open for writing.
final class DescriptorWriter: FileWriter {
    private var descriptor: Int32
    private let path: String
    /// What flushes it.
    private let files: SystemFileOperations

    init(descriptor: Int32, path: String, files: SystemFileOperations) {
        self.descriptor = descriptor
        self.path = path
        self.files = files
    }

    deinit { close() }

    func write(_ data: Data) throws {
        try data.withUnsafeBytes { try write(contentsOf: $0) }
    }

    func write(contentsOf buffer: UnsafeRawBufferPointer) throws {
        guard var pointer = buffer.baseAddress else { return }
        var remaining = buffer.count
        while remaining > 0 {
            let written = systemWrite(descriptor, pointer, remaining)
            if written < 0 {
                let code = errno
                if code == EINTR { continue }
                throw SystemFileOperations.error(code, "cannot write", path)
            }
            remaining -= written
            pointer += written
        }
    }

    func synchronize() throws {
        try files.flush(descriptor: descriptor, path: path)
    }

    func close() {
        guard descriptor >= 0 else { return }
        _ = systemClose(descriptor)
        descriptor = -1
    }
}
