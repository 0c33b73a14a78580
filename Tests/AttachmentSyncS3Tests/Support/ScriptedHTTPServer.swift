import AttachmentSync
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// What the scripted server answers to one request.
struct ScriptedResponse: Sendable {
    var status: HTTPResponseStatus
    /// Headers to send; a `content-length` is added (the body's size) unless one is given, or a
    /// `transfer-encoding` (the body is then sent chunked).
    var headers: [(name: String, value: String)] = []
    var body: Data = Data()
    /// Send only this many bytes of the body, then send nothing more and keep the connection open until the
    /// server stops: a server that stalls (or trickles) mid-body.
    var holdAfter: Int?

    init(
        _ status: HTTPResponseStatus, headers: [(name: String, value: String)] = [], body: Data = Data(),
        holdAfter: Int? = nil
    ) {
        self.status = status
        self.headers = headers
        self.body = body
        self.holdAfter = holdAfter
    }
}

/// One request the scripted server received.
struct ScriptedRequest: Sendable {
    var method: HTTPMethod
    var uri: String
    var headers: HTTPHeaders

    func header(_ name: String) -> String? { headers.first(name: name) }
}

/// An HTTP/1.1 server on 127.0.0.1 whose every answer a test scripts: for the responses real servers give
/// only when something is wrong (a `206` for another range, a `416` for an object that shrank, a body that
/// stalls after a few bytes, a size that is not the attachment's). It records every request.
final class ScriptedHTTPServer: Sendable {
    typealias Handler = @Sendable (ScriptedRequest) async -> ScriptedResponse

    let port: Int
    private let received = LockedValue<[ScriptedRequest]>([])
    private let serverTask: LockedValue<Task<Void, Never>?> = LockedValue(nil)
    private let channel: NIOAsyncChannel<NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>, Never>

    /// The requests received so far, in order.
    var requests: [ScriptedRequest] { received.withLock { $0 } }

    /// The server's base URL, `http://127.0.0.1:<port>`.
    var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }

    private init(
        channel: NIOAsyncChannel<NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>, Never>
    ) throws {
        self.channel = channel
        guard let port = channel.channel.localAddress?.port else {
            throw HarnessFailure("the scripted server has no port")
        }
        self.port = port
    }

    /// Starts a server on a free port of 127.0.0.1 that answers every request with `handler`.
    static func start(_ handler: @escaping Handler) async throws -> ScriptedHTTPServer {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: "127.0.0.1", port: 0) { child in
                child.eventLoop.makeCompletedFuture {
                    try child.pipeline.syncOperations.configureHTTPServerPipeline()
                    return try NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>(
                        wrappingChannelSynchronously: child)
                }
            }
        let server = try ScriptedHTTPServer(channel: channel)
        let task = Task {
            await withDiscardingTaskGroup { group in
                do {
                    try await channel.executeThenClose { connections in
                        for try await connection in connections {
                            group.addTask { await server.serve(connection, handler) }
                        }
                    }
                } catch {
                    return  // the server was stopped
                }
            }
        }
        server.serverTask.withLock { $0 = task }
        return server
    }

    /// Stops the server and drops its connections (a stalled body included).
    func stop() async {
        try? await channel.channel.close()
        let task = serverTask.withLock { $0 }
        task?.cancel()
        await task?.value
    }

    private func serve(
        _ connection: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>,
        _ handler: Handler
    ) async {
        try? await connection.executeThenClose { inbound, outbound in
            var current: ScriptedRequest?
            for try await part in inbound {
                switch part {
                case .head(let head):
                    current = ScriptedRequest(method: head.method, uri: head.uri, headers: head.headers)
                case .body:
                    continue
                case .end:
                    guard let request = current else { continue }
                    received.withLock { $0.append(request) }
                    let response = await handler(request)
                    var headers = HTTPHeaders(response.headers.map { ($0.name, $0.value) })
                    if !headers.contains(name: "content-length"), !headers.contains(name: "transfer-encoding") {
                        headers.add(name: "content-length", value: String(response.body.count))
                    }
                    try await outbound.write(
                        .head(HTTPResponseHead(version: .http1_1, status: response.status, headers: headers)))
                    let sent = request.method == .HEAD ? Data() : response.body.prefix(response.holdAfter ?? .max)
                    if !sent.isEmpty { try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: sent)))) }
                    if response.holdAfter != nil, request.method != .HEAD {
                        // Stall: nothing more until the server stops (which cancels this task and so ends
                        // the wait on a stream nothing is ever sent to).
                        let (stall, continuation) = AsyncStream.makeStream(of: Void.self)
                        for await _ in stall {}
                        continuation.finish()
                        return
                    }
                    try await outbound.write(.end(nil))
                    current = nil
                }
            }
        }
    }
}

/// A failure of the test harness itself.
struct HarnessFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
