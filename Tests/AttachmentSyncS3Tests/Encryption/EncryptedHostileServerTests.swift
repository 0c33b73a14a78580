import AttachmentSync
import AttachmentSyncTesting
import Crypto
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync
@testable import AttachmentSyncHTTP

/// Random histories of one encrypted download through the real HTTP transport, from a scripted server on
/// 127.0.0.1 that drops connections mid-body, answers ranges with the whole object, has the object replaced
/// during a split download, answers a resume from the wrong offset, sends bodies chunked, or serves a new
/// version between tries (under a new `ETag`, or under the old one with conditions ignored, which only
/// decryption can catch).
/// The transport writes the ciphertext (in parallel ranges, resumed, or started over) while the encrypted
/// adapter decrypts it as it arrives and frees what it decrypted. Whatever the history, a download that
/// succeeds holds exactly the version the server served last, with the digest of the bytes on disk and
/// nothing left beside it, and once the server behaves the next try succeeds.
@Suite("Encrypted downloads from hostile servers, random histories (scripted, on 127.0.0.1)")
struct EncryptedHostileServerTests {
    static let keys = StaticKeyProvider(
        keys: ["k1": SymmetricKey(data: Data((0..<32).map { UInt8(truncatingIfNeeded: $0 &* 11 &+ 3) }))],
        current: "k1")

    /// The ciphertext `EncryptedRemoteStorage` stores for `content` as attachment "photo".
    static func ciphertext(_ content: Data) async throws -> Data {
        let memory = InMemoryRemoteStorage()
        let attachment = AttachmentSync.Attachment(
            id: "photo", filename: "photo.jpg", state: .queuedUpload, size: Int64(content.count),
            contentHash: FileStreaming.sha256(content))
        try await EncryptedRemoteStorage(wrapping: memory, keys: keys).uploadFile(data: content, attachment: attachment)
        return try #require(await memory.file(named: "photo.jpg"))
    }

    enum Fault: String, CaseIterable {
        case none, dropsMidBody, ignoresRanges, replacedDuring, wrongResumeStart, newVersionBefore, chunked
        /// A new version under the old `ETag`, conditions ignored: only decryption can tell the versions apart.
        case newVersionSameETag
    }

    @Test("every success is the version served last, byte for byte, whatever the server did", arguments: 0..<32)
    func randomHistory(seed: Int) async throws {
        var random = SplitMix64(seed: 0x4057_1E00 &+ UInt64(seed))
        let transport: TestTransport = seed % 2 == 0 ? .asyncHTTPClient : .urlSession
        // Above 1 MiB, so the adapter decrypts while the transport writes.
        let size = 1_100_000 + Int(random.next(below: 1_500_000))
        let contents = [
            testBytes(count: size, seed: UInt32(200 + seed * 2)), testBytes(count: size, seed: UInt32(201 + seed * 2)),
        ]
        var versions: [Data] = []
        for content in contents { versions.append(try await Self.ciphertext(content)) }
        let object = ServedObject(versions[0])
        var served = 0
        var changes = 0
        let splits = random.next(below: 3) != 0
        let knowsSize = random.next(below: 4) != 0
        let frees = random.next(below: 2) == 0
        var log = ["\(transport), \(size) bytes, splits \(splits), size known \(knowsSize), frees \(frees)"]
        let attachment = AttachmentSync.Attachment(
            id: "photo", filename: "photo.jpg", state: .queuedDownload, size: knowsSize ? Int64(size) : nil)

        let splitting: @Sendable (inout HTTPRemoteStorage.Configuration) -> Void = { configuration in
            if splits { HostileServerTests.splitting(&configuration) }
        }
        try await HostileServerTests.with(object, transport: transport, configure: splitting) { storage, _, directory in
            // Freeing what it decrypted every 256 KiB (so a try after a failure resumes from the content kept) or
            // only every 64 MiB (the default: it resumes from the ciphertext).
            let remote = EncryptedRemoteStorage(
                wrapping: storage, keys: Self.keys, segmentSize: EncryptedFormat.defaultSegmentSize,
                freeingInterval: frees ? 256 << 10 : 64 << 20)
            let destination = directory.appendingPathComponent(".attachment-sync-download-photo.jpg")

            /// One try, from the partial file as the queue keeps it; checks what a success holds.
            func attempt() async throws -> AttachmentError? {
                let partial = (try? FileManager.default.attributesOfItem(atPath: destination.path)[.size] as? Int) ?? 0
                let info: RemoteObjectInfo
                do {
                    info = try await withDeadline(seconds: 120, "a download from the scripted server") {
                        try await remote.downloadFile(attachment: attachment, into: destination, from: Int64(partial)) {
                            _ in
                        }
                    }
                } catch let error as AttachmentError {
                    return error
                } catch {
                    Issue.record("not a typed error: \(error), \(log)")
                    return AttachmentError(code: .remoteUnavailable, message: "\(error)")
                }
                let received = try Data(contentsOf: destination)
                #expect(received == contents[served], "a success holds other bytes than version \(served): \(log)")
                #expect(info.writtenSize == Int64(received.count), "\(log)")
                #expect(info.writtenSHA256 == FileStreaming.sha256(received), "\(log)")
                let left = try FileManager.default.contentsOfDirectory(atPath: directory.path)
                #expect(left == [destination.lastPathComponent], "only the content is left: \(left), \(log)")
                // The queue moves a finished download away: the next try starts from nothing.
                try FileManager.default.removeItem(at: destination)
                return nil
            }

            var lied = false
            func behave(_ fault: Fault) {
                if fault == .newVersionBefore || fault == .newVersionSameETag {
                    served = 1 - served
                }
                // After a lie the server behaves again: what it serves has an ETag of its own.
                if fault == .newVersionBefore || (lied && fault != .newVersionSameETag) { changes += 1 }
                lied = fault == .newVersionSameETag
                let (version, etag) = (versions[served], "\"v\(changes)\"")
                let dropAt = 1_000 + Int(random.next(below: 400_000))
                let resumeStart = Int(random.next(below: UInt64(version.count)))
                object.change {
                    $0 = ServedObject.Behaviour(content: version, etag: etag)
                    switch fault {
                    case .none, .newVersionBefore: break
                    case .dropsMidBody: $0.closeAfter = dropAt
                    case .ignoresRanges: $0.ignoresClosedRanges = true
                    case .replacedDuring: $0.closedRangesSeeETag = "\"replaced\""
                    case .wrongResumeStart: $0.rangeStart = resumeStart
                    case .chunked: $0.chunked = true
                    case .newVersionSameETag: $0.ignoresIfMatch = true
                    }
                }
            }

            for _ in 0..<(2 + Int(random.next(below: 5))) {
                let fault = Fault.allCases[Int(random.next(below: UInt64(Fault.allCases.count)))]
                behave(fault)
                let failure = try await attempt()
                log.append("\(fault.rawValue) → \(failure.map { "\($0.code)" } ?? "ok")")
                // Unless it lies about the version, the server never sends wrong bytes, only fewer, or another
                // version under another ETag: a try may fail as a dropped connection does, never as damage.
                let allowed: [AttachmentError.Code] =
                    fault == .newVersionSameETag ? [.remoteUnavailable, .integrityMismatch] : [.remoteUnavailable]
                #expect(
                    failure.map { allowed.contains($0.code) } ?? true,
                    "\(failure?.code.description ?? ""): \(failure?.message ?? ""), \(log)")
            }
            // The server behaves from now on: the next try succeeds, resuming or starting over as the faults left it.
            behave(.none)
            let failure = try await attempt()
            #expect(failure == nil, "a try against a server that behaves failed: \(failure?.message ?? ""), \(log)")
        }
    }
}
