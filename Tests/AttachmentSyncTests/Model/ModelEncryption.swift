import Crypto
import Foundation
import TestSupport

@testable import AttachmentSync

/// The app's encryption keys: every key it ever made (as its keychain or key server holds them), which of
/// them this device has lost, and which one is current. They are the app's, not the queue's: they outlive
/// simulated crashes.
final class ModelKeys: KeyProvider {
    private struct State {
        var keys: [String: SymmetricKey] = [:]
        var order: [String] = []
        var current = ""
        var lost: Set<String> = []
    }

    private let state = LockedValue(State())

    init() {
        add()
    }

    /// The `number`-th key: made from its number, so a replay encrypts to the same bytes.
    static func material(_ number: Int) -> SymmetricKey {
        SymmetricKey(data: Data(SHA256.hash(data: Data("model key \(number)".utf8))))
    }

    func currentKeyId() async throws -> String { current }

    func key(id: String) async throws -> SymmetricKey? {
        state.withLock { $0.lost.contains(id) ? nil : $0.keys[id] }
    }

    /// The key `id` whether or not this device lost it: what other devices (and the harness) hold.
    func anyKey(_ id: String) -> SymmetricKey? { state.withLock { $0.keys[id] } }

    var current: String { state.withLock { $0.current } }
    var lost: Set<String> { state.withLock { $0.lost } }

    /// Makes a new key the current one; returns its id.
    @discardableResult
    func add() -> String {
        state.withLock { state in
            let number = state.order.count + 1
            let id = "k\(number)"
            state.keys[id] = Self.material(number)
            state.order.append(id)
            state.current = id
            return id
        }
    }

    /// Loses the `pick`-th (modulo) of the keys this device has; returns its id (`nil`: it has none).
    @discardableResult
    func lose(_ pick: Int) -> String? {
        state.withLock { state in
            let present = state.order.filter { !state.lost.contains($0) }
            guard !present.isEmpty else { return nil }
            let id = present[pick % present.count]
            state.lost.insert(id)
            return id
        }
    }

    /// Gets back the `pick`-th (modulo) of the keys this device lost; returns its id (`nil`: none was lost).
    @discardableResult
    func restore(_ pick: Int) -> String? {
        state.withLock { state in
            let lost = state.order.filter { state.lost.contains($0) }
            guard !lost.isEmpty else { return nil }
            let id = lost[pick % lost.count]
            state.lost.remove(id)
            return id
        }
    }

    func restoreAll() {
        state.withLock { $0.lost = [] }
    }
}

/// Another device's keys: the app's, none lost.
struct OtherDeviceKeys: KeyProvider {
    let keys: ModelKeys

    func currentKeyId() async throws -> String { keys.current }
    func key(id: String) async throws -> SymmetricKey? { keys.anyKey(id) }
}

/// Another device's uploads: straight into the store, as ``RemoteStore/seed(_:_:sha256:)`` puts them (no
/// call of this device's), with the SHA-256 its adapter stores when `keepsHash`.
struct SeedingRemote: RemoteStorageAdapter {
    let store: RemoteStore
    let keepsHash: Bool

    func uploadFile(data: Data, attachment: Attachment) async throws {
        await store.seed(attachment.filename, data, sha256: keepsHash ? attachment.contentHash : nil)
    }

    func downloadFile(attachment: Attachment) async throws -> Data {
        throw AttachmentError(code: .unsupported, message: "another device only uploads")
    }

    func deleteFile(attachment: Attachment) async throws {
        throw AttachmentError(code: .unsupported, message: "another device only uploads")
    }
}

/// The model's remote as ``KeyRotation`` needs it: it lists its files, and replaces one only while it holds
/// the bytes that were read (`If-Match`). Calls pass the process's crash switch; a replacement is a call
/// that faults apply to, as an upload is. A type of its own, so that a setup without encryption keeps a
/// remote that cannot describe its files (which the queue asks before it evicts a file, when it can).
struct ReplaceableModelRemote: ReplaceableRemoteStorage {
    let remote: ModelRemote
    var store: RemoteStore { remote.store }
    var crash: CrashSwitch { remote.disk.crash }

    func uploadFile(data: Data, attachment: Attachment) async throws {
        try await remote.uploadFile(data: data, attachment: attachment)
    }

    func downloadFile(attachment: Attachment) async throws -> Data {
        try await remote.downloadFile(attachment: attachment)
    }

    func deleteFile(attachment: Attachment) async throws {
        try await remote.deleteFile(attachment: attachment)
    }

    var supportsRangedDownloads: Bool { remote.supportsRangedDownloads }

    func downloadFile(
        attachment: Attachment, appendingTo destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws {
        try await remote.downloadFile(
            attachment: attachment, appendingTo: destination, from: offset, progress: progress)
    }

    func downloadFile(
        attachment: Attachment, into destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws -> RemoteObjectInfo {
        try await remote.downloadFile(attachment: attachment, into: destination, from: offset, progress: progress)
    }

    func listFiles(after continuation: String?) async throws -> RemoteFileListing {
        try crash.check("remote list")
        guard continuation == nil else { return RemoteFileListing(files: [], next: nil) }
        let files = await store.objects.map {
            RemoteFile(storedName: $0.key, filename: $0.value.name, size: Int64($0.value.data.count))
        }
        return RemoteFileListing(
            files: files.sorted { $0.storedName.utf8.lexicographicallyPrecedes($1.storedName.utf8) }, next: nil)
    }

    func storedName(forFilename filename: String) throws -> String { RemoteStore.key(filename) }

    func deleteListedFile(_ file: RemoteFile) async throws {
        try crash.check("remote delete")
        try await store.deleteStored(file.storedName)
    }

    func fileInfo(attachment: Attachment) async throws -> RemoteObjectInfo? {
        try crash.check("remote head")
        return await store.info(attachment.filename)
    }

    func replaceFile(fileURL: URL, attachment: Attachment, replacing expectedSHA256: String) async throws {
        try crash.check("remote replace")
        let data = try Data(contentsOf: fileURL)
        if let recorded = attachment.contentHash?.lowercased(), recorded != FileStreaming.sha256(data) {
            throw AttachmentError(
                code: .integrityMismatch, message: "the replacement is not the content its hash says",
                attachmentId: attachment.id, name: attachment.filename)
        }
        try await store.replace(attachment.filename, data, sha256: attachment.contentHash, expected: expectedSHA256)
    }
}

/// The harness's side of an encrypted setup: the app's keys, the wrapper the device's queue (and the app's
/// key rotation) uses, another device's encrypted uploads, and what the invariants need: the content of a
/// stored object (opened with every key the app ever had, lost ones too) and the objects that expose
/// content.
final class ModelEncryption {
    /// Small segments: most files span several.
    static let segmentSize = 1_024
    let keys = ModelKeys()
    /// The first 32 bytes of every content of 32 bytes or more the history made (in the order made): no
    /// stored object may hold one of them.
    private var clearPrefixes: [Data] = []
    /// Objects already looked at, by store key: their bytes and how many prefixes they were searched for.
    private var looked: [String: (data: Data, prefixes: Int)] = [:]
    /// Objects already opened, by attachment id (escaped) and store key.
    private var opened: [String: (sealed: Data, content: Data?)] = [:]

    /// The device's remote (its queue's, and its key rotation's): the model's behind the app's keys.
    func wrap(_ remote: ModelRemote) -> EncryptedRemoteStorage {
        EncryptedRemoteStorage(
            wrapping: ReplaceableModelRemote(remote: remote), keys: keys, plaintextReads: .refused,
            segmentSize: Self.segmentSize)
    }

    /// Notes a content the history made, which no stored object may hold in the clear.
    func note(_ content: Data) {
        guard content.count >= 32 else { return }
        let prefix = Data(content.prefix(32))
        if !clearPrefixes.contains(prefix) { clearPrefixes.append(prefix) }
    }

    /// Another device (holding every key) uploads `data` as attachment `id`, encrypted under the current key.
    func seed(_ store: RemoteStore, id: String, filename: String, data: Data, keepsHash: Bool) async throws {
        let other = EncryptedRemoteStorage(
            wrapping: SeedingRemote(store: store, keepsHash: keepsHash), keys: OtherDeviceKeys(keys: keys),
            plaintextReads: .refused, segmentSize: Self.segmentSize)
        try await other.uploadFile(
            data: data,
            attachment: Attachment(
                id: id, filename: filename, state: .synced, hasSynced: true, size: Int64(data.count),
                contentHash: FileStreaming.sha256(data)))
    }

    /// The content of attachment `id`'s stored object `sealed`, opened with the key its header names (a lost
    /// one too: the harness knows them all); when it does not open, the stored bytes themselves (which no
    /// content equals: ciphertext is longer than its content).
    func content(of sealed: Data?, id: String, key: String) -> Data? {
        guard let sealed else { return nil }
        let cacheKey = FileName.safeName(id, keepingDots: true) + "/" + key
        if let hit = opened[cacheKey], hit.sealed == sealed { return hit.content ?? sealed }
        let keys = keys
        var stream = DecryptingStream(attachmentId: id) { keyId in
            guard let key = keys.anyKey(keyId) else { throw HarnessError("no key \(keyId)") }
            return key
        }
        let content = try? Data(stream.update(sealed) + stream.finish())
        opened[cacheKey] = (sealed, content)
        return content ?? sealed
    }

    /// The key id in a stored object's header, or `nil` when it has none.
    static func keyId(of object: Data) -> String? {
        (try? EncryptedFormat.Header.parse(Array(object.prefix(304))))?.keyId
    }

    /// What the stored objects expose: an object that does not start with the format's magic, or that holds
    /// the first 32 bytes of a content in the clear. Each object is searched once for each prefix (again
    /// when its bytes change).
    func exposures(in objects: [String: RemoteStore.Object]) -> [String] {
        var found: [String] = []
        for (key, object) in objects {
            var searched = 0
            if let seen = looked[key], seen.data == object.data {
                searched = seen.prefixes
            } else if !object.data.starts(with: EncryptedFormat.magic) {
                found.append("\(object.name) is stored without the encrypted format's magic")
            }
            for prefix in clearPrefixes[searched...] where object.data.range(of: prefix) != nil {
                found.append("\(object.name) holds the first 32 bytes of a content in the clear")
                break
            }
            looked[key] = (object.data, clearPrefixes.count)
        }
        return found
    }
}

extension ModelRun {
    /// `ATTACHMENT_SYNC_MODEL_DEBUG` prints what each rotation did.
    static let debug = ProcessInfo.processInfo.environment["ATTACHMENT_SYNC_MODEL_DEBUG"] != nil

    /// The steps of an encrypted setup.
    func performKeyStep(_ step: ModelStep) async {
        guard let encryption else { return }
        switch step {
        case .rotateKey(let duringSync):
            await rotateKey(encryption, duringSync: duringSync)
        case .loseKey(let pick, let restart):
            encryption.keys.lose(pick)
            guard restart else { return }
            do { try await self.restart() } catch { violation("restart failed: \(error)", kind: "harness") }
        case .restoreKey(let pick):
            guard encryption.keys.restore(pick) != nil else { return }
            _ = try? await queue.keysDidChange()
        default:
            break
        }
    }

    /// A new key becomes current, and the app rotates every stored file of the device's records to it with
    /// ``KeyRotation``, through the queue's own remote, while the queue's uploads, downloads and deletes
    /// run: those of sync when it is on, and of a pass the app asks for meanwhile when `duringSync`. A
    /// rotation that completed while no key was lost leaves every stored file of a record it had to look at
    /// (uploaded or downloaded, not being deleted, before and after it) under the new key.
    private func rotateKey(_ encryption: ModelEncryption, duringSync: Bool) async {
        guard let remote = encryptedRemote else { return }
        let keyId = encryption.keys.add()
        guard let before = try? await records() else { return }
        let queue = queue!
        let pass = Task {
            if duringSync { try? await queue.syncNow() }
        }
        let report: KeyRotation.Report?
        do {
            report = try await KeyRotation.rotate(
                db: db, remote: remote,
                workDirectory: URL(fileURLWithPath: rotationWork))
        } catch {
            if Self.debug {
                print("rotation to \(keyId) failed: \(error)")
            }
            report = nil
        }
        await pass.value
        if Self.debug, let report {
            print(
                "rotation to \(keyId): rotated \(report.rotated), \(report.upToDate) up to date, missing "
                    + "\(report.missing), failed \(report.failed.map(\.reason))")
        }
        // Every synced file rotated (uploads still pending keep the report incomplete; their objects are not
        // covered here).
        guard let report, report.failed.isEmpty, report.keyId == keyId, encryption.keys.lost.isEmpty,
            !crash.hasCrashed, let after = try? await records()
        else { return }
        func stored(_ records: [AttachmentRecord]) -> [String: (id: String, filename: String)] {
            Dictionary(
                records.filter { $0.hasSynced && $0.state != .queuedDelete }.map {
                    (Self.key($0.id), (id: $0.id, filename: $0.filename))
                }, uniquingKeysWith: { first, _ in first })
        }
        let now = stored(after)
        let objects = await store.objects
        for (key, record) in stored(before) where now[key]?.filename == record.filename {
            guard let object = objects[RemoteStore.key(record.filename)] else { continue }
            let found = ModelEncryption.keyId(of: object.data)
            if found != keyId {
                let said = report.missing.contains(record.id) ? " (the rotation reported it not stored)" : ""
                violation(
                    "after a complete rotation to key \(keyId), the stored file of \(record.id.debugDescription) is "
                        + "under key \(found ?? "none")\(said)", kind: "rotation")
            }
        }
    }

    /// The invariants of an encrypted setup: every stored object is encrypted and holds no content in the
    /// clear, and nothing is given up because a key was missing (a missing key makes a transfer wait).
    func checkEncryption(
        _ encryption: ModelEncryption, records: [AttachmentRecord], objects: [String: RemoteStore.Object]
    ) {
        for exposure in encryption.exposures(in: objects) {
            violation(exposure, kind: "exposed")
        }
        for record in records where record.givenUp != nil {
            guard let error = record.lastError,
                error.contains("keyUnavailable") || error.contains("is not on this device")
            else { continue }
            violation(
                "\(record.id.debugDescription) was given up (\(record.givenUp!)) because a key was missing: \(error)",
                kind: "key")
        }
    }
}

/// The model remote's background requests, for the encrypting remote to form its own from.
extension ReplaceableModelRemote: BackgroundTransferForming {
    func backgroundUploadRequest(for attachment: Attachment, fileURL: URL) async throws -> PreparedRequest? {
        try await remote.backgroundUploadRequest(for: attachment, fileURL: fileURL)
    }

    func backgroundDownloadRequest(for attachment: Attachment) async throws -> PreparedRequest? {
        try await remote.backgroundDownloadRequest(for: attachment)
    }

    func storedObject(for attachment: Attachment) async throws -> RemoteObjectInfo? {
        try await remote.storedObject(for: attachment)
    }
}
