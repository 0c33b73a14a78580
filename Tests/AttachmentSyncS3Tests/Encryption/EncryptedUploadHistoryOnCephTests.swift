import AttachmentSync
import Crypto
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync
@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// Random histories of one encrypted multipart upload to Ceph, tried until it succeeds: the network fails at a
/// random part, the file changes while its parts go (and is put back), the current key changes between tries,
/// the file is touched without changing, parts go one to three at a time. Whatever happened, the bucket never
/// holds an object under the name that does not decrypt to exactly the content (no parts of two keys or two
/// contents in one object), the stored hash is that of the bytes stored, and once the upload succeeds nothing
/// is left behind: no unfinished upload, no state, no part file.
@Suite("Encrypted multipart uploads over random histories of faults (Ceph)")
struct EncryptedUploadHistoryOnCephTests {
    static let keys: [String: SymmetricKey] = [
        "2026-11": EncryptedOnCephTests.key, "2026-12": SymmetricKey(data: Data(repeating: 0x5A, count: 32)),
    ]

    /// What one try does.
    struct TryPlan: CustomStringConvertible {
        var currentKey: String
        /// The network fails before this part goes.
        var failingPart: Int?
        /// The file is overwritten with other bytes just before this part goes (and put back after the try).
        var changedAtPart: Int?
        /// The file is written again with the same bytes before the try (a new modification time).
        var touched: Bool
        var concurrency: Int

        var description: String {
            "key \(currentKey) fail \(failingPart.map(String.init) ?? "-") change "
                + "\(changedAtPart.map(String.init) ?? "-") touched \(touched) concurrency \(concurrency)"
        }
    }

    @Test("the bucket only ever holds the content, sealed whole under one key", arguments: 0..<12)
    func randomHistory(seed: Int) async throws {
        var random = SplitMix64(seed: 0xCE9A_0000 &+ UInt64(seed))
        let mebibyte = 1024 * 1024
        // 3 or 4 parts of 5 MiB.
        let size = 11 * mebibyte + Int(random.next(below: UInt64(5 * mebibyte)))
        let content = testBytes(count: size, seed: UInt32(300 + seed))
        let other = testBytes(count: size, seed: UInt32(400 + seed))
        var log = ["\(size) bytes"]
        try await S3TestBucket.with("encrypted-history") { admin, bucket in
            try await withTemporaryDirectory { directory in
                let source = directory.appendingPathComponent("clip.bin")
                try content.write(to: source)
                let file = MultipartReplacementTests.attachment("clip.bin", content)
                let stored = AttachmentSync.Attachment(id: file.id, filename: file.filename, state: .synced)

                /// What the bucket holds under the name, if anything, is the content sealed whole under one key.
                func checkBucket() async throws {
                    guard let info = try await admin.fileInfo(attachment: stored) else { return }
                    let bytes = try await admin.downloadFile(attachment: stored)
                    #expect(info.sha256 == FileStreaming.sha256(bytes), "the stored hash is the bytes': \(log)")
                    var opener = DecryptingStream(attachmentId: file.id) { id in
                        guard let key = Self.keys[id] else { throw AttachmentError(code: .keyUnavailable, message: id) }
                        return key
                    }
                    let opened = try? Data(opener.update(bytes) + opener.finish())
                    #expect(opened == content, "the object does not decrypt to the content: \(log)")
                }

                func attempt(_ plan: TryPlan) async throws -> AttachmentError? {
                    if plan.touched { try content.write(to: source) }
                    let changed = LockedValue(false)
                    let storage = try bucket.makeStorage { configuration in
                        configuration.multipartThreshold = MultipartReplacementTests.fiveMiB
                        configuration.partSize = MultipartReplacementTests.fiveMiB
                        configuration.partConcurrency = plan.concurrency
                        configuration.requestObserver = { event in
                            guard event.operation == "UploadPart", let part = event.partNumber else { return }
                            if part == plan.changedAtPart, !changed.withLock({ $0 }) {
                                changed.withLock { $0 = true }
                                try other.write(to: source)
                            }
                            if part == plan.failingPart {
                                throw AttachmentError(code: .remoteUnavailable, message: "injected: network lost")
                            }
                        }
                    }
                    let remote = EncryptedRemoteStorage(
                        wrapping: storage, keys: StaticKeyProvider(keys: Self.keys, current: plan.currentKey))
                    var failure: AttachmentError?
                    do {
                        try await remote.uploadFile(fileURL: source, attachment: file) { _ in }
                    } catch let error as AttachmentError {
                        failure = error
                    } catch {
                        Issue.record("not a typed error: \(error), \(log)")
                    }
                    try await storage.shutdown()
                    if changed.withLock({ $0 }) { try content.write(to: source) }
                    return failure
                }

                var succeeded = false
                for _ in 0..<(1 + Int(random.next(below: 5))) where !succeeded {
                    let parts = (size + 5 * mebibyte - 1) / (5 * mebibyte)
                    let plan = TryPlan(
                        currentKey: random.next(below: 2) == 0 ? "2026-11" : "2026-12",
                        failingPart: random.next(below: 3) == 0 ? nil : 1 + Int(random.next(below: UInt64(parts))),
                        changedAtPart: random.next(below: 4) != 0
                            ? nil : 2 + Int(random.next(below: UInt64(parts - 1))),
                        touched: random.next(below: 4) == 0, concurrency: 1 + Int(random.next(below: 3)))
                    let failure = try await attempt(plan)
                    log.append("\(plan) → \(failure.map { "\($0.code)" } ?? "ok")")
                    if let failure {
                        #expect(
                            [.remoteUnavailable, .integrityMismatch].contains(failure.code),
                            "\(failure.code): \(failure.message), \(log)")
                    }
                    succeeded = failure == nil
                    try await checkBucket()
                }
                if !succeeded {
                    let plan = TryPlan(
                        currentKey: random.next(below: 2) == 0 ? "2026-11" : "2026-12", failingPart: nil,
                        changedAtPart: nil, touched: false, concurrency: 2)
                    let failure = try await attempt(plan)
                    log.append("clean \(plan) → \(failure.map { "\($0.code)" } ?? "ok")")
                    #expect(failure == nil, "a clean try failed: \(failure?.message ?? ""), \(log)")
                    try await checkBucket()
                }
                #expect(try await admin.fileInfo(attachment: stored) != nil, "the object is stored: \(log)")
                #expect(try await admin.listMultipartUploadIds().isEmpty, "no unfinished upload: \(log)")
                #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["clip.bin"], "\(log)")
                let state = try FileManager.default.contentsOfDirectory(atPath: bucket.stateDirectory.path)
                #expect(state.isEmpty, "no upload state left: \(state), \(log)")
            }
        }
    }
}
