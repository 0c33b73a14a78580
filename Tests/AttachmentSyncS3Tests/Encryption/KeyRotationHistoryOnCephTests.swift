import AttachmentSync
import Crypto
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync
@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// Key rotation on Ceph interrupted at random: each run with the journal has one request fail (any of its
/// reads, writes, parts or completions), then a run without faults. After every run each stored file is its
/// content sealed whole under the old key or the new one, with its stored hash that of the bytes stored; a
/// file is never lost or mixed. The run without faults completes, and one more rotates nothing.
@Suite("Key rotation on Ceph over random interruptions")
struct KeyRotationHistoryOnCephTests {
    static let keys: [String: SymmetricKey] = [
        "2026-05": KeyRotationOnCephTests.old, "2026-11": KeyRotationOnCephTests.new,
    ]

    @Test("every stored file is always its content under one key; the rotation finishes", arguments: 0..<8)
    func randomInterruptions(seed: Int) async throws {
        var random = SplitMix64(seed: 0x207A_7E00 &+ UInt64(seed))
        let mebibyte = 1024 * 1024
        try await S3TestBucket.with("rotation-history") { _, bucket in
            let deviceRemote = try bucket.makeStorage {
                $0.multipartThreshold = MultipartReplacementTests.fiveMiB
                $0.partSize = MultipartReplacementTests.fiveMiB
            }
            try await withTemporaryDirectory { directory in
                let oldKeys = StaticKeyProvider(keys: ["2026-05": KeyRotationOnCephTests.old], current: "2026-05")
                try await S3QueueDevice.with(
                    folder: directory.appendingPathComponent("a"),
                    storage: EncryptedRemoteStorage(wrapping: deviceRemote, keys: oldKeys)
                ) { device in
                    var saved: [(id: String, filename: String, content: Data)] = []
                    let sizes = [0, 1, 90_000, 2 * mebibyte + 7, 6 * mebibyte + 5]
                    for index in 0..<(3 + Int(random.next(below: 3))) {
                        let size = sizes[Int(random.next(below: UInt64(sizes.count)))] + Int(random.next(below: 5))
                        let content = testBytes(count: size, seed: UInt32(900 + seed * 10 + index))
                        let photo = try await device.savePhoto(content, checklist: "item-\(index)")
                        saved.append((photo.id, photo.filename, content))
                    }
                    try await device.queue.syncNow()
                    var log = ["sizes \(saved.map(\.content.count))"]
                    let journal = directory.appendingPathComponent("rotation.journal")
                    let rotatingKeys = StaticKeyProvider(keys: Self.keys, current: "2026-11")
                    let checker = try bucket.makeStorage()

                    /// Each stored file is its content sealed whole under one of the keys, its stored hash the
                    /// bytes'; returns the key ids, in the order of `saved`.
                    func checkStored() async throws -> [String?] {
                        var ids: [String?] = []
                        for file in saved {
                            let plain = AttachmentSync.Attachment(id: file.id, filename: file.filename, state: .synced)
                            let stored = try await checker.downloadFile(attachment: plain)
                            let info = try #require(try await checker.fileInfo(attachment: plain), "\(log)")
                            #expect(info.sha256 == FileStreaming.sha256(stored), "\(file.id): \(log)")
                            var opener = DecryptingStream(attachmentId: file.id) { id in
                                guard let key = Self.keys[id] else {
                                    throw AttachmentError(code: .keyUnavailable, message: id)
                                }
                                return key
                            }
                            let opened = try? Data(opener.update(stored) + opener.finish())
                            #expect(opened == file.content, "\(file.id) is not its content: \(log)")
                            ids.append(try EncryptedFormat.Header.parse(Array(stored.prefix(304)))?.keyId)
                        }
                        return ids
                    }

                    func history() async throws {
                        for _ in 0..<(1 + Int(random.next(below: 3))) {
                            // One request of the run fails: which one, counted from the run's first.
                            let failing = 1 + Int(random.next(below: 20))
                            let count = LockedValue(0)
                            let faulty = try bucket.makeStorage { configuration in
                                configuration.multipartThreshold = MultipartReplacementTests.fiveMiB
                                configuration.partSize = MultipartReplacementTests.fiveMiB
                                configuration.requestObserver = { event in
                                    let index = count.withLock {
                                        $0 += 1
                                        return $0
                                    }
                                    if index == failing {
                                        throw AttachmentError(
                                            code: .remoteUnavailable, message: "injected: \(event.operation) failed")
                                    }
                                }
                            }
                            let report: KeyRotation.Report
                            do {
                                report = try await KeyRotation.rotate(
                                    db: device.db, remote: EncryptedRemoteStorage(wrapping: faulty, keys: rotatingKeys),
                                    journal: journal, workDirectory: directory.appendingPathComponent("work"))
                                try await faulty.shutdown()
                            } catch {
                                try await faulty.shutdown()
                                // The run may stop as a whole when the request that fails is its first look at the
                                // remote; that is a retryable failure too.
                                #expect((error as? AttachmentError)?.code == .remoteUnavailable, "\(error), \(log)")
                                log.append("fail request \(failing): the run stopped")
                                _ = try await checkStored()
                                continue
                            }
                            log.append(
                                "fail request \(failing): rotated \(report.rotated.count), up to date \(report.upToDate), "
                                    + "failed \(report.failed.map { "\($0.code.map { "\($0)" } ?? "-")" })")
                            #expect(report.missing.isEmpty, "\(log)")
                            #expect(
                                report.failed.allSatisfy { $0.code == .remoteUnavailable },
                                "\(report.failed.map(\.reason)), \(log)")
                            _ = try await checkStored()
                        }
                        let clean = EncryptedRemoteStorage(wrapping: try bucket.makeStorage(), keys: rotatingKeys)
                        let report = try await KeyRotation.rotate(db: device.db, remote: clean, journal: journal)
                        log.append("clean: rotated \(report.rotated.count), up to date \(report.upToDate)")
                        #expect(report.isComplete, "\(report.failed.map(\.reason)), \(log)")
                        #expect(report.rotated.count + report.upToDate == saved.count, "\(log)")
                        #expect(
                            try await checkStored() == saved.map { _ in "2026-11" }, "all under the new key: \(log)")
                        let again = try await KeyRotation.rotate(db: device.db, remote: clean)
                        #expect(again.rotated.isEmpty && again.upToDate == saved.count, "\(log)")
                        try await (clean.base as? S3RemoteStorage)?.shutdown()
                        let left = try FileManager.default.contentsOfDirectory(
                            atPath: directory.appendingPathComponent("work").path)
                        #expect(left.isEmpty, "the work folder is empty: \(left), \(log)")
                    }
                    do {
                        try await history()
                        try await checker.shutdown()
                    } catch {
                        try? await checker.shutdown()
                        throw error
                    }
                }
            }
        }
    }
}
