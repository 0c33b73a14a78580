import Foundation
import Testing

@testable import AttachmentSync

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The flushing rules of ``SystemFileOperations`` over recorded system calls, so the Apple rules (whose
/// `fsync` stops at the drive and whose `F_FULLFSYNC` drains it) run on Linux too.
@Suite("Drive flushes")
struct DriveFlushTests {
    /// One recorded call: its name and the file it was given (by name in the test's folder).
    struct Call: Equatable, CustomStringConvertible {
        var name: String
        var file: String
        var description: String { "\(name)(\(file))" }
    }

    /// Records calls, each naming its file by the inode it has open; the drain fails with `drainError`.
    final class Recorder: Sendable {
        let calls = LockedValue<[Call]>([])
        let files: [UInt64: String]
        let drainError: Int32?

        init(_ paths: [String], drainError: Int32? = nil) throws {
            var files: [UInt64: String] = [:]
            for path in paths {
                var status = stat()
                guard stat(path, &status) == 0 else { throw POSIXError(.ENOENT) }
                files[UInt64(status.st_ino)] = (path as NSString).lastPathComponent
            }
            self.files = files
            self.drainError = drainError
        }

        func record(_ name: String, _ descriptor: Int32) {
            var status = stat()
            let file = fstat(descriptor, &status) == 0 ? files[UInt64(status.st_ino)] ?? "?" : "?"
            calls.withLock { $0.append(Call(name: name, file: file)) }
        }

        func fsync(_ descriptor: Int32) -> Int32 {
            record("fsync", descriptor)
            return 0
        }

        func drain(_ descriptor: Int32) -> Int32 {
            record("drain", descriptor)
            guard let drainError else { return 0 }
            errno = drainError
            return -1
        }

        func syncfs(_ descriptor: Int32) -> Int32 {
            record("syncfs", descriptor)
            return 0
        }

        /// Calls shaped like Apple's: `fsync`, and a drain of the drive; no volume flush.
        var apple: FlushCalls {
            FlushCalls(fsync: { self.fsync($0) }, drainDrive: { self.drain($0) }, syncVolume: nil)
        }

        /// Calls shaped like Linux's: `fsync` reaches stable storage, and a volume flush.
        var linux: FlushCalls {
            FlushCalls(fsync: { self.fsync($0) }, drainDrive: nil, syncVolume: { self.syncfs($0) })
        }
    }

    /// Three small files in a fresh folder.
    private func threeFiles(in folder: TemporaryDirectory) throws -> [String] {
        try ["a", "b", "c"].map { name in
            let path = folder.path(name)
            try Data(name.utf8).write(to: URL(fileURLWithPath: path))
            return path
        }
    }

    @Test("Apple: a batch is fsynced file by file and the drive drained once, on the last file")
    func appleBatchDrainsOnce() throws {
        let folder = try TemporaryDirectory()
        let paths = try threeFiles(in: folder)
        let recorder = try Recorder(paths)
        try SystemFileOperations(flushCalls: recorder.apple).synchronizeFiles(atPaths: paths)
        // F_FULLFSYNC drains the device's whole queue: what was fsynced before it on the device is on stable
        // storage when it returns (fcntl(2) on macOS), so one drain covers the batch.
        #expect(
            recorder.calls.withLock { $0 }
                == [Call(name: "fsync", file: "a"), Call(name: "fsync", file: "b"), Call(name: "drain", file: "c")])
    }

    @Test("Apple: where the drive cannot be drained (F_FULLFSYNC unsupported), the last file is fsynced too")
    func appleBatchFallsBack() throws {
        let folder = try TemporaryDirectory()
        let paths = try threeFiles(in: folder)
        let recorder = try Recorder(paths, drainError: ENOTSUP)
        try SystemFileOperations(flushCalls: recorder.apple).synchronizeFiles(atPaths: paths)
        #expect(
            recorder.calls.withLock { $0 }
                == [
                    Call(name: "fsync", file: "a"), Call(name: "fsync", file: "b"), Call(name: "drain", file: "c"),
                    Call(name: "fsync", file: "c"),
                ])
    }

    @Test("Apple: one file or folder is drained; a failed fsync fails the batch before any drain")
    func appleSingleFlushAndFailure() throws {
        let folder = try TemporaryDirectory()
        let paths = try threeFiles(in: folder)
        let recorder = try Recorder(paths)
        let files = SystemFileOperations(flushCalls: recorder.apple)
        try files.synchronizeFile(atPath: paths[1])
        #expect(recorder.calls.withLock { $0 } == [Call(name: "drain", file: "b")])

        let failing = SystemFileOperations(
            flushCalls: FlushCalls(
                fsync: { _ in
                    errno = EIO
                    return -1
                }, drainDrive: recorder.apple.drainDrive, syncVolume: nil))
        recorder.calls.withLock { $0 = [] }
        let error = #expect(throws: AttachmentError.self) { try failing.synchronizeFiles(atPaths: paths) }
        #expect(error?.path == paths[0])
        #expect(recorder.calls.withLock { $0 }.isEmpty, "no drain after a failed fsync")
    }

    @Test("after a durable commit the drive holding the database is drained on Apple, left alone on Linux")
    func drainAfterCommit() throws {
        let folder = try TemporaryDirectory()
        let paths = try threeFiles(in: folder)
        let recorder = try Recorder(paths)
        SystemFileOperations(flushCalls: recorder.apple).drainDrive(holding: paths[0])
        SystemFileOperations(flushCalls: recorder.apple).drainDrive(holding: folder.path("missing"))
        SystemFileOperations(flushCalls: recorder.linux).drainDrive(holding: paths[1])
        #expect(recorder.calls.withLock { $0 } == [Call(name: "drain", file: "a")])
    }

    @Test("Linux: syncfs flushes a batch only on kernels that report write-back errors from it (5.8 and later)")
    func syncfsNeedsLinux58() {
        let releases = [
            "4.14.336-257.562.amzn2.x86_64": false, "4.18.0-513.el8.x86_64": false, "5.4.0-169-generic": false,
            "5.7.19": false, "5.8.0": true, "5.10.0-28-cloud-amd64": true, "6.1.0-18-amd64": true,
            "6.18.44-fc-v669": true, "": false, "garbage": false,
        ]
        for (release, reports) in releases {
            #expect(FlushCalls.syncfsReportsErrors(kernelRelease: release) == reports, "\(release)")
        }
    }

    @Test("Linux: a batch is one volume flush, a single file one fsync")
    func linuxBatch() throws {
        let folder = try TemporaryDirectory()
        let paths = try threeFiles(in: folder)
        let recorder = try Recorder(paths)
        let files = SystemFileOperations(flushCalls: recorder.linux)
        try files.synchronizeFiles(atPaths: paths)
        try files.synchronizeFiles(atPaths: [paths[2]])
        #expect(recorder.calls.withLock { $0 } == [Call(name: "syncfs", file: "a"), Call(name: "fsync", file: "c")])
    }
}
