import Foundation

@testable import AttachmentSync

/// The model's background transfer service, the system's side: transfers handed over, run when a step says
/// so (also while the app's process is dead), their results kept until acknowledged. It outlives simulated
/// crashes, as the system's service outlives the app. Requests are the model remote's (a name and a SHA-256
/// in headers); they run against the same ``RemoteStore``, faults included, create-only as S3's presigned
/// PUT with `If-None-Match: *` and `Content-MD5` is.
actor BackgroundStore {
    private(set) var handed: [String: BackgroundTransfer] = [:]
    private var order: [String] = []
    private(set) var results: [String: BackgroundTransferResult] = [:]
    /// The last result acknowledged, for a duplicate report.
    private var lastAcknowledged: BackgroundTransferResult?
    private var subscribers: [UUID: AsyncStream<Void>.Continuation] = [:]
    let bodies: URL
    let remote: RemoteStore

    init(bodies: URL, remote: RemoteStore) {
        self.bodies = bodies
        self.remote = remote
        try? FileManager.default.createDirectory(at: bodies, withIntermediateDirectories: true)
    }

    func hand(_ transfer: BackgroundTransfer) {
        guard handed[transfer.id] == nil, results[transfer.id] == nil else { return }
        handed[transfer.id] = transfer
        order.append(transfer.id)
    }

    func acknowledge(_ id: String) {
        if let result = results.removeValue(forKey: id) {
            lastAcknowledged = result
            if let body = result.bodyFile { try? FileManager.default.removeItem(at: body) }
        }
    }

    /// Runs the oldest `count` transfers handed over.
    func run(_ count: Int) async {
        for _ in 0..<count {
            guard !order.isEmpty else { break }
            let id = order.removeFirst()
            guard let transfer = handed[id] else { continue }
            // Named as running until its result is there, as the service contract asks.
            results[id] = await perform(transfer)
            handed[id] = nil
        }
        for subscriber in subscribers.values { subscriber.yield() }
    }

    /// Forgets the oldest transfer handed over: it neither runs nor reports (the device restarted, the
    /// system gave up on it).
    func loseOne() {
        guard !order.isEmpty else { return }
        handed[order.removeFirst()] = nil
    }

    /// Reports the last acknowledged result again (a duplicate report).
    func repeatLast() {
        guard var result = lastAcknowledged, results[result.id] == nil else { return }
        result.bodyFile = nil
        results[result.id] = result
    }

    func subscribe() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        subscribers[UUID()] = continuation
        return stream
    }

    private func perform(_ transfer: BackgroundTransfer) async -> BackgroundTransferResult {
        let name = transfer.request.headers.first { $0.name == "x-name" }?.value ?? ""
        let id = transfer.id
        do {
            switch transfer.direction {
            case .upload:
                guard let file = transfer.bodyFile, let data = FileManager.default.contents(atPath: file.path) else {
                    return BackgroundTransferResult(id: id, statusCode: nil, error: "the body file is gone")
                }
                let sha256 = transfer.request.headers.first { $0.name == "x-sha256" }?.value
                // The server checks the body against the request (as Content-MD5 is checked).
                if sha256 != FileStreaming.sha256(data) { return BackgroundTransferResult(id: id, statusCode: 400) }
                if await remote.objects[RemoteStore.key(name)] != nil {
                    return BackgroundTransferResult(id: id, statusCode: 412)
                }
                try await remote.upload(name, data, sha256: sha256)
                return BackgroundTransferResult(id: id, statusCode: 200)
            case .download:
                let (served, info) = try await remote.download(name)
                let body = bodies.appendingPathComponent(id)
                try served.write(to: body)
                return BackgroundTransferResult(
                    id: id, statusCode: 200,
                    headers: [.init(name: "Content-Length", value: "\(info.size ?? Int64(served.count))")],
                    bodyFile: body)
            }
        } catch let error as AttachmentError where error.code == .remoteNotFound {
            return BackgroundTransferResult(id: id, statusCode: 404)
        } catch let error as AttachmentError where error.retryAfter != nil {
            let seconds = error.retryAfter.map { $0.components.seconds } ?? 1
            return BackgroundTransferResult(
                id: id, statusCode: 503, headers: [.init(name: "Retry-After", value: "\(seconds)")])
        } catch {
            return BackgroundTransferResult(id: id, statusCode: nil, error: "\(error)")
        }
    }
}

/// One simulated process's connection to the background service: its calls pass the process's crash
/// switch (a dead process calls nothing).
struct ModelBackgroundService: BackgroundTransferService {
    let store: BackgroundStore
    let crash: CrashSwitch

    func hand(_ transfer: BackgroundTransfer) async throws {
        try crash.check("background hand")
        await store.hand(transfer)
    }

    func running() async throws -> Set<String> {
        try crash.check("background running")
        return Set(await store.handed.keys)
    }

    func results() async throws -> [BackgroundTransferResult] {
        try crash.check("background results")
        return Array(await store.results.values)
    }

    func acknowledge(_ id: String) async throws {
        try crash.check("background acknowledge")
        await store.acknowledge(id)
    }

    func resultsMayHaveArrived() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let store = store
        let task = Task {
            for await _ in await store.subscribe() { continuation.yield() }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }
}

extension ModelRemote: BackgroundTransferForming {
    /// A PUT of the file, carrying the attachment's name and the file's SHA-256, which the service checks
    /// against the body it sends (the model's `Content-MD5`).
    func backgroundUploadRequest(for attachment: Attachment, fileURL: URL) async throws -> PreparedRequest? {
        try disk.crash.check("remote form upload")
        let digest = try await disk.digest(ofFileAt: fileURL.path)
        if let expected = attachment.contentHash?.lowercased(), expected != digest.sha256 {
            throw AttachmentError(
                code: .integrityMismatch, message: "the file is not the attachment's content",
                attachmentId: attachment.id)
        }
        return PreparedRequest(
            method: "PUT", url: URL(string: "model://remote/object")!,
            headers: [.init(name: "x-name", value: attachment.filename), .init(name: "x-sha256", value: digest.sha256)])
    }

    func backgroundDownloadRequest(for attachment: Attachment) async throws -> PreparedRequest? {
        PreparedRequest(
            method: "GET", url: URL(string: "model://remote/object")!,
            headers: [.init(name: "x-name", value: attachment.filename)])
    }

    func storedObject(for attachment: Attachment) async throws -> RemoteObjectInfo? {
        try disk.crash.check("remote head")
        return await store.info(attachment.filename)
    }
}
