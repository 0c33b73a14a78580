import AttachmentSync
import AttachmentSyncHTTP
import AttachmentSyncS3
import AttachmentSyncTesting
import Foundation

// attachment-sync-transfer-service SPOOL [--concurrency N] [--stall-after N] [--pace MS]
//
// --pace MS: each transfer waits MS milliseconds before it sends its request (a slow network), so that a
// test's kills of the app land while transfers are still with the service.
// --stall-after N: once this process has reported N results, every later transfer is sent but never reported
// (its task waits for ever): a test kills the service then, sure that transfers are unfinished.
// The other half of SpoolTransferService: runs every transfer handed into SPOOL/pending, a few at a time, and
// reports each: a download's body into SPOOL/bodies/<id>, then the result into SPOOL/results/<id>.json, then
// the transfer leaves SPOOL/pending. It runs until it is killed, like the system service it stands in for,
// whether the process that handed the transfers is alive or not; killed mid-transfer, it runs the transfer
// again when it is started again.

let arguments = Array(CommandLine.arguments.dropFirst())
guard let root = arguments.first else {
    FileHandle.standardError.write(
        Data("usage: attachment-sync-transfer-service SPOOL [--concurrency N] [--stall-after N] [--pace MS]\n".utf8))
    exit(2)
}
func option(_ name: String) -> Int? {
    arguments.firstIndex(of: name).flatMap { arguments.indices.contains($0 + 1) ? Int(arguments[$0 + 1]) : nil }
}
let concurrency = option("--concurrency") ?? 4
let stallAfter = option("--stall-after")
let pace = option("--pace") ?? 0
/// How many results this process has reported or is about to.
let reportedCount = LockedValue(0)

let spool = try TransferFolder(URL(fileURLWithPath: root))
let engine = AsyncHTTPClientEngine(connectTimeout: .seconds(10), requestTimeout: .seconds(60))

/// Runs one transfer and reports it.
func run(_ transfer: BackgroundTransfer) async {
    var result = BackgroundTransferResult(id: transfer.id, statusCode: nil)
    if pace > 0 { try? await Task.sleep(for: .milliseconds(pace)) }
    do {
        var headers = HTTPHeaderFields()
        for header in transfer.request.headers { headers.add(name: header.name, value: header.value) }
        var body = HTTPEngineRequestBody.none
        if transfer.direction == .upload, let file = transfer.bodyFile {
            let size = try SystemFileOperations().info(atPath: file.path)?.size ?? 0
            body = .file(
                HTTPFileBody(url: file, offset: 0, length: size, files: SystemFileOperations(), throttle: nil) { _ in })
        }
        let response = try await engine.execute(
            HTTPEngineRequest(
                method: HTTPRequestMethod(rawValue: transfer.request.method), url: transfer.request.url.absoluteString,
                headers: headers, body: body))
        result.statusCode = response.status.code
        result.headers = response.headers.map { PreparedRequest.Header(name: $0.name, value: $0.value) }
        if transfer.direction == .download, response.status.isSuccess {
            let target = spool.bodyURL(transfer.id)
            let partial = spool.bodies.appendingPathComponent(".partial-\(transfer.id)")
            _ = FileManager.default.createFile(atPath: partial.path, contents: nil)
            let handle = try FileHandle(forWritingTo: partial)
            do {
                for try await chunk in response.body { try handle.write(contentsOf: chunk) }
                try handle.close()
            } catch {
                try? handle.close()
                throw error
            }
            try spool.install(target) { temporary in try FileManager.default.moveItem(at: partial, to: temporary) }
            result.bodyFile = target
        } else {
            _ = try await response.body.collect(upTo: 1 << 20)
        }
    } catch {
        result.statusCode = nil
        result.headers = []
        result.bodyFile = nil
        result.error = "\(error)"
    }
    let mayReport = reportedCount.withLock { count -> Bool in
        guard stallAfter.map({ count < $0 }) ?? true else { return false }
        count += 1
        return true
    }
    if !mayReport {
        while true { try? await Task.sleep(for: .seconds(3600)) }
    }
    do {
        try spool.write(result, to: spool.resultURL(transfer.id))
        try spool.remove(spool.pendingURL(transfer.id))
    } catch {
        FileHandle.standardError.write(Data("cannot report \(transfer.id): \(error)\n".utf8))
    }
}

/// The transfers running now.
let started = LockedValue<Set<String>>([])
await withDiscardingTaskGroup { group in
    while true {
        let reported = (try? spool.ids(in: spool.results)) ?? []
        let pending = (try? spool.ids(in: spool.pending)) ?? []
        for id in pending.subtracting(reported).sorted() {
            let claimed = started.withLock { started -> Bool in
                guard started.count < concurrency, !started.contains(id) else { return false }
                started.insert(id)
                return true
            }
            guard claimed else { continue }
            guard let transfer = try? spool.read(BackgroundTransfer.self, from: spool.pendingURL(id)) else {
                started.withLock { _ = $0.remove(id) }
                continue
            }
            group.addTask {
                await run(transfer)
                started.withLock { _ = $0.remove(id) }
            }
        }
        try? await Task.sleep(for: .milliseconds(10))
    }
}
