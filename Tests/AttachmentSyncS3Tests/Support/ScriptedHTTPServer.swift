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
    /// Send only this many bytes of the body, then close the connection: a connection that drops mid-body.
    var closeAfter: Int?

    init(
        _ status: HTTPResponseStatus, headers: [(name: String, value: String)] = [], body: Data = Data(),
        holdAfter: Int? = nil, closeAfter: Int? = nil
    ) {
        self.status = status
        self.headers = headers
        self.body = body
        self.holdAfter = holdAfter
        self.closeAfter = closeAfter
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
///
/// Plain channel handlers, not NIO's async channels: those must each be finished, and a connection accepted
/// while the server shuts down could not be, which crashes the process.
final class ScriptedHTTPServer: Sendable {
    typealias Handler = @Sendable (ScriptedRequest) async -> ScriptedResponse

    let port: Int
    private let serverChannel: any Channel
    private let received = LockedValue<[ScriptedRequest]>([])
    /// The open connections, closed by ``stop()``.
    private let connections = LockedValue<[any Channel]>([])

    /// The requests received so far, in order.
    var requests: [ScriptedRequest] { received.withLock { $0 } }

    /// The server's base URL, `http://127.0.0.1:<port>`.
    var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }

    private init(serverChannel: any Channel) throws {
        self.serverChannel = serverChannel
        guard let port = serverChannel.localAddress?.port else {
            throw HarnessFailure("the scripted server has no port")
        }
        self.port = port
    }

    /// Starts a server on a free port of 127.0.0.1 that answers every request with `handler`.
    static func start(_ handler: @escaping Handler) async throws -> ScriptedHTTPServer {
        let recorder = LockedValue<ScriptedHTTPServer?>(nil)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { child in
                child.eventLoop.makeCompletedFuture {
                    try child.pipeline.syncOperations.configureHTTPServerPipeline()
                    try child.pipeline.syncOperations.addHandler(
                        ScriptedHandler(handler: handler) { request in
                            recorder.withLock { $0 }?.received.withLock { $0.append(request) }
                        })
                    recorder.withLock { $0 }?.connections.withLock { $0.append(child) }
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let server = try ScriptedHTTPServer(serverChannel: channel)
        recorder.withLock { $0 = server }
        return server
    }

    /// Stops the server: the listening socket closes, then every connection (a stalled response included).
    func stop() async {
        try? await serverChannel.close()
        for connection in connections.withLock({ $0 }) {
            try? await connection.close()
        }
    }
}

/// Answers each request on a connection with the script, on the connection's event loop.
private final class ScriptedHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let handler: ScriptedHTTPServer.Handler
    let record: @Sendable (ScriptedRequest) -> Void
    private var current: ScriptedRequest?

    init(handler: @escaping ScriptedHTTPServer.Handler, record: @escaping @Sendable (ScriptedRequest) -> Void) {
        self.handler = handler
        self.record = record
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            current = ScriptedRequest(method: head.method, uri: head.uri, headers: head.headers)
        case .body:
            break
        case .end:
            guard let request = current else { return }
            current = nil
            record(request)
            let handler = handler
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            Task {
                let response = await handler(request)
                loopBound.eventLoop.execute {
                    let (this, context) = loopBound.value
                    this.write(response, for: request, context: context)
                }
            }
        }
    }

    private func write(_ response: ScriptedResponse, for request: ScriptedRequest, context: ChannelHandlerContext) {
        var headers = HTTPHeaders(response.headers.map { ($0.name, $0.value) })
        if !headers.contains(name: "content-length"), !headers.contains(name: "transfer-encoding") {
            headers.add(name: "content-length", value: String(response.body.count))
        }
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: response.status, headers: headers))),
            promise: nil)
        let sent =
            request.method == .HEAD
            ? Data() : response.body.prefix(min(response.holdAfter ?? .max, response.closeAfter ?? .max))
        if !sent.isEmpty {
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: sent)))), promise: nil)
        }
        if let closeAfter = response.closeAfter, closeAfter < response.body.count, request.method != .HEAD {
            // What was sent goes out first; then the connection drops with the body unfinished.
            let flushed = context.eventLoop.makePromise(of: Void.self)
            context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(ByteBuffer()))), promise: flushed)
            flushed.futureResult.whenComplete { [channel = context.channel] _ in channel.close(promise: nil) }
            return
        }
        if response.holdAfter != nil, request.method != .HEAD {
            context.flush()  // and nothing more: the response stalls until the server stops
            return
        }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }
}

/// A failure of the test harness itself.
struct HarnessFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
