import AttachmentSync
import Crypto
import Foundation

/// Signs HTTP requests with AWS Signature Version 4: in an `Authorization` header, or in the query string of a
/// presigned URL.
///
/// It is a pure value: it does no I/O and reads no clock (the caller passes the signing time), so every step
/// (canonical request, string to sign, signature) can be checked against published test vectors.
/// ``S3RemoteStorage`` uses it for every request; use it directly to sign requests of your own.
///
/// Paths and query parameters are given decoded; the signer percent-encodes them once, escaping every byte
/// outside RFC 3986's unreserved set (`A-Z a-z 0-9 - . _ ~`) and keeping `/` between path segments, and
/// returns the encoded forms (``SignedRequest/encodedPath``, ``SignedRequest/encodedQuery``) so the URL that
/// is sent is exactly the one that was signed.
///
/// ```swift
/// let signer = SigV4Signer(region: "us-east-1")
/// let signed = signer.sign(
///     SigV4Signer.Request(method: "GET", path: "/bucket/photo 1.jpg", headers: [("host", "s3.example.com")]),
///     payload: .unsigned, credentials: credentials, date: Date())
/// // send `signed.headers` to `https://s3.example.com` + signed.encodedPath
/// ```
public struct SigV4Signer: Sendable {
    /// The request to sign: method, decoded path and query, and the headers to sign.
    public struct Request: Sendable {
        /// The HTTP method, `GET` say.
        public var method: String
        /// The path, decoded (`/bucket/my photo.jpg`), starting with `/`.
        public var path: String
        /// The query parameters, decoded, in any order. A parameter without a value has an empty value.
        public var query: [(name: String, value: String)]
        /// The headers to sign, `host` included. Names are case-insensitive; a name given several times has
        /// its values joined with commas, in order.
        public var headers: [(name: String, value: String)]

        /// Creates a request.
        ///
        /// - Parameters:
        ///   - method: The HTTP method.
        ///   - path: The decoded path, starting with `/`.
        ///   - query: The decoded query parameters. The default is none.
        ///   - headers: The headers to sign, `host` included. The default is none.
        public init(
            method: String, path: String, query: [(name: String, value: String)] = [],
            headers: [(name: String, value: String)] = []
        ) {
            self.method = method
            self.path = path
            self.query = query
            self.headers = headers
        }
    }

    /// What the request's body is signed as.
    public enum Payload: Sendable, Hashable {
        /// The body's SHA-256, lowercase hex. A server that checks payloads (S3 does) rejects a body that does
        /// not match.
        case sha256(String)
        /// `UNSIGNED-PAYLOAD`: the body is not covered by the signature.
        case unsigned

        /// The SHA-256 of an empty body, for requests without one.
        public static let empty = Payload.sha256(SigV4Signer.hex(SHA256.hash(data: Data())))

        /// The payload of `data`, hashed.
        public static func hashing(_ data: Data) -> Payload {
            .sha256(SigV4Signer.hex(SHA256.hash(data: data)))
        }

        /// The value that goes into the canonical request and the `x-amz-content-sha256` header.
        public var value: String {
            switch self {
            case .sha256(let hex): hex
            case .unsigned: "UNSIGNED-PAYLOAD"
            }
        }
    }

    /// A request signed in its headers.
    public struct SignedRequest: Sendable {
        /// The canonical request (step 1 of SigV4).
        public var canonicalRequest: String
        /// The string to sign (step 2).
        public var stringToSign: String
        /// The signature, lowercase hex (step 3).
        public var signature: String
        /// The `Authorization` header's value.
        public var authorization: String
        /// The headers to send: the request's own, plus `x-amz-date`, `x-amz-content-sha256` (when
        /// ``SigV4Signer/sendsContentSHA256``), `x-amz-security-token` (with a session token) and
        /// `authorization`.
        public var headers: [(name: String, value: String)]
        /// The path, percent-encoded as it was signed, to put in the URL.
        public var encodedPath: String
        /// The query string, percent-encoded and sorted as it was signed (without `?`), to put in the URL.
        public var encodedQuery: String
    }

    /// A request signed in its query string: a presigned URL's parts.
    public struct PresignedRequest: Sendable {
        /// The canonical request.
        public var canonicalRequest: String
        /// The string to sign.
        public var stringToSign: String
        /// The signature, lowercase hex.
        public var signature: String
        /// The path, percent-encoded as it was signed.
        public var encodedPath: String
        /// The query string with the `X-Amz-…` parameters and the signature (without `?`).
        public var encodedQuery: String
    }

    /// The region requests are signed for, `us-east-1` say.
    public var region: String
    /// The service requests are signed for. The default is `s3`.
    public var service: String
    /// Whether the path is normalized before signing (`.` and `..` segments resolved, repeated `/` collapsed),
    /// as most AWS services require. S3 signs the path exactly as given, because `a//b` and `a/./b` are
    /// valid, distinct keys. The default is `false`.
    public var normalizesPath: Bool
    /// Whether header-signed requests carry the payload's hash in a signed `x-amz-content-sha256` header, as
    /// S3 requires. The default is `true`.
    public var sendsContentSHA256: Bool

    /// The last signing key derived, shared by the copies of this signer.
    private let signingKeys = SigningKeys()

    /// Creates a signer.
    ///
    /// - Parameters:
    ///   - region: The region, `us-east-1` say.
    ///   - service: The service. The default is `s3`.
    ///   - normalizesPath: Whether to normalize the path before signing. The default is `false` (S3's rule).
    ///   - sendsContentSHA256: Whether to send and sign `x-amz-content-sha256`. The default is `true` (S3's
    ///     rule).
    public init(region: String, service: String = "s3", normalizesPath: Bool = false, sendsContentSHA256: Bool = true) {
        self.region = region
        self.service = service
        self.normalizesPath = normalizesPath
        self.sendsContentSHA256 = sendsContentSHA256
    }

    /// The longest a presigned URL may stay valid: 7 days, S3's limit.
    public static let maximumPresignedExpiry: Duration = .seconds(604_800)

    /// Signs `request` in its headers.
    ///
    /// Adds `x-amz-date` (replacing any given), `x-amz-content-sha256` when ``sendsContentSHA256``, and
    /// `x-amz-security-token` when the credentials have a session token; all of them are signed.
    ///
    /// - Parameters:
    ///   - request: The request.
    ///   - payload: The body's hash, or ``Payload/unsigned``.
    ///   - credentials: The keys to sign with.
    ///   - date: The signing time; servers reject signatures more than about 15 minutes off their clock.
    /// - Returns: The signed request: headers to send and the encoded path and query for the URL.
    public func sign(_ request: Request, payload: Payload, credentials: S3Credentials, date: Date) -> SignedRequest {
        let timestamp = Self.timestamp(date)
        var headers = request.headers.filter { $0.name.lowercased() != "x-amz-date" }
        headers.append(("x-amz-date", timestamp.dateTime))
        if sendsContentSHA256 {
            headers.removeAll { $0.name.lowercased() == "x-amz-content-sha256" }
            headers.append(("x-amz-content-sha256", payload.value))
        }
        if let token = credentials.sessionToken {
            headers.removeAll { $0.name.lowercased() == "x-amz-security-token" }
            headers.append(("x-amz-security-token", token))
        }
        let canonical = canonicalParts(path: request.path, query: request.query, headers: headers)
        let canonicalRequest = [
            request.method, canonical.path, canonical.query, canonical.headers, canonical.signedHeaders,
            payload.value,
        ].joined(separator: "\n")
        let scope = "\(timestamp.date)/\(region)/\(service)/aws4_request"
        let stringToSign = Self.stringToSign(canonicalRequest, dateTime: timestamp.dateTime, scope: scope)
        let signature = signature(of: stringToSign, date: timestamp.date, secret: credentials.secretAccessKey)
        let authorization =
            "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyId)/\(scope), "
            + "SignedHeaders=\(canonical.signedHeaders), Signature=\(signature)"
        headers.append(("authorization", authorization))
        return SignedRequest(
            canonicalRequest: canonicalRequest, stringToSign: stringToSign, signature: signature,
            authorization: authorization, headers: headers, encodedPath: canonical.path,
            encodedQuery: canonical.query)
    }

    /// Signs `request` in its query string, for a URL that works without credentials until it expires.
    ///
    /// The payload is `UNSIGNED-PAYLOAD`, so a presigned `PUT` accepts any body. The session token, if any,
    /// goes into the signed query as `X-Amz-Security-Token`. The request's headers (at least `host`) are
    /// signed; whoever uses the URL must send them unchanged.
    ///
    /// - Parameters:
    ///   - request: The request.
    ///   - credentials: The keys to sign with.
    ///   - date: The signing time: the URL is valid from then on.
    ///   - expiresIn: How long the URL stays valid, from 1 second to ``maximumPresignedExpiry``.
    /// - Returns: The encoded path and query to put in the URL.
    /// - Throws: `AttachmentError` with code `AttachmentError.Code.invalidConfiguration`
    ///   when `expiresIn` is out of range.
    public func presign(
        _ request: Request, credentials: S3Credentials, date: Date, expiresIn: Duration
    ) throws -> PresignedRequest {
        let seconds = expiresIn.components.seconds
        guard seconds >= 1, expiresIn <= Self.maximumPresignedExpiry else {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "a presigned URL expires after 1 second to 7 days, not \(expiresIn)",
                name: "expiresIn")
        }
        let timestamp = Self.timestamp(date)
        let scope = "\(timestamp.date)/\(region)/\(service)/aws4_request"
        let signedHeaders = Self.canonicalHeaders(request.headers).signedHeaders
        var query = request.query
        query.append(("X-Amz-Algorithm", "AWS4-HMAC-SHA256"))
        query.append(("X-Amz-Credential", "\(credentials.accessKeyId)/\(scope)"))
        query.append(("X-Amz-Date", timestamp.dateTime))
        query.append(("X-Amz-Expires", String(seconds)))
        if let token = credentials.sessionToken {
            query.append(("X-Amz-Security-Token", token))
        }
        query.append(("X-Amz-SignedHeaders", signedHeaders))
        let canonical = canonicalParts(path: request.path, query: query, headers: request.headers)
        let canonicalRequest = [
            request.method, canonical.path, canonical.query, canonical.headers, canonical.signedHeaders,
            Payload.unsigned.value,
        ].joined(separator: "\n")
        let stringToSign = Self.stringToSign(canonicalRequest, dateTime: timestamp.dateTime, scope: scope)
        let signature = signature(of: stringToSign, date: timestamp.date, secret: credentials.secretAccessKey)
        return PresignedRequest(
            canonicalRequest: canonicalRequest, stringToSign: stringToSign, signature: signature,
            encodedPath: canonical.path, encodedQuery: canonical.query + "&X-Amz-Signature=" + signature)
    }

    /// `s` percent-encoded: every byte of its UTF-8 outside RFC 3986's unreserved set becomes `%XX`
    /// (uppercase); `/` too unless `keepingSlashes`.
    public static func uriEncode(_ s: String, keepingSlashes: Bool = false) -> String {
        var result = ""
        result.reserveCapacity(s.utf8.count)
        for byte in s.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"):
                result.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "/") where keepingSlashes:
                result.append("/")
            default:
                result.append("%")
                result.append(hexDigits[Int(byte >> 4)])
                result.append(hexDigits[Int(byte & 0x0F)])
            }
        }
        return result
    }

    // MARK: - Steps

    private func canonicalParts(
        path: String, query: [(name: String, value: String)], headers: [(name: String, value: String)]
    ) -> (path: String, query: String, headers: String, signedHeaders: String) {
        let path = normalizesPath ? Self.normalize(path) : path
        let encodedPath = Self.uriEncode(path.isEmpty ? "/" : path, keepingSlashes: true)
        let encodedQuery = query.map { (name: Self.uriEncode($0.name), value: Self.uriEncode($0.value)) }
            .sorted {
                $0.name == $1.name
                    ? $0.value.utf8.lexicographicallyPrecedes($1.value.utf8)
                    : $0.name.utf8.lexicographicallyPrecedes($1.name.utf8)
            }
            .map { "\($0.name)=\($0.value)" }
            .joined(separator: "&")
        let canonicalHeaders = Self.canonicalHeaders(headers)
        return (encodedPath, encodedQuery, canonicalHeaders.text, canonicalHeaders.signedHeaders)
    }

    /// Lowercased names, sorted; values trimmed with inner runs of spaces collapsed, and repeated names'
    /// values joined with commas in order.
    static func canonicalHeaders(_ headers: [(name: String, value: String)]) -> (text: String, signedHeaders: String) {
        var values: [String: [String]] = [:]
        for (name, value) in headers {
            values[name.lowercased(), default: []].append(collapseSpaces(value))
        }
        let names = values.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        let text = names.map { "\($0):\(values[$0]!.joined(separator: ","))\n" }.joined()
        return (text, names.joined(separator: ";"))
    }

    private static func collapseSpaces(_ value: String) -> String {
        value.split(whereSeparator: { $0 == " " || $0 == "\t" }).joined(separator: " ")
    }

    /// RFC 3986 dot-segment removal, with empty segments collapsed; keeps a trailing `/`.
    static func normalize(_ path: String) -> String {
        var output: [Substring] = []
        let segments = path.split(separator: "/", omittingEmptySubsequences: true)
        for segment in segments {
            switch segment {
            case ".": continue
            case "..": _ = output.popLast()
            default: output.append(segment)
            }
        }
        var result = "/" + output.joined(separator: "/")
        let last = segments.last
        if !output.isEmpty, path.hasSuffix("/") || last == "." || last == ".." {
            result += "/"
        }
        return result
    }

    private static func stringToSign(_ canonicalRequest: String, dateTime: String, scope: String) -> String {
        let hash = hex(SHA256.hash(data: Data(canonicalRequest.utf8)))
        return "AWS4-HMAC-SHA256\n\(dateTime)\n\(scope)\n\(hash)"
    }

    private func signature(of stringToSign: String, date: String, secret: String) -> String {
        let mac = HMAC<SHA256>.authenticationCode(
            for: Data(stringToSign.utf8), using: signingKey(date: date, secret: secret))
        return Self.hex(mac)
    }

    /// The key for a day's signatures: four HMACs to derive, the same for every request of that day with the
    /// same secret, region and service, so the last one is kept.
    private func signingKey(date: String, secret: String) -> SymmetricKey {
        let scope = SigningKeys.Scope(date: date, secret: secret, region: region, service: service)
        if let key = signingKeys.last.withLock({ $0?.scope == scope ? $0?.key : nil }) { return key }
        let dateKey = Self.hmac(key: SymmetricKey(data: Data("AWS4\(secret)".utf8)), date)
        let regionKey = Self.hmac(key: dateKey, region)
        let serviceKey = Self.hmac(key: regionKey, service)
        let key = Self.hmac(key: serviceKey, "aws4_request")
        signingKeys.last.withLock { $0 = (scope, key) }
        return key
    }

    private static func hmac(key: SymmetricKey, _ message: String) -> SymmetricKey {
        SymmetricKey(data: Data(HMAC<SHA256>.authenticationCode(for: Data(message.utf8), using: key)))
    }

    // MARK: - Formatting

    private static let hexDigits: [Character] = Array("0123456789ABCDEF")

    /// Lowercase hex of `bytes`.
    static func hex<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        let digits = Array("0123456789abcdef".utf8)
        var result = [UInt8]()
        for byte in bytes {
            result.append(digits[Int(byte >> 4)])
            result.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: result, as: UTF8.self)
    }

    /// `yyyyMMdd` and `yyyyMMdd'T'HHmmss'Z'` in UTC.
    static func timestamp(_ date: Date) -> (date: String, dateTime: String) {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        func pad(_ value: Int?, _ width: Int) -> String {
            let text = String(value ?? 0)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        let day = pad(parts.year, 4) + pad(parts.month, 2) + pad(parts.day, 2)
        return (day, day + "T" + pad(parts.hour, 2) + pad(parts.minute, 2) + pad(parts.second, 2) + "Z")
    }
}

/// The last signing key a ``SigV4Signer`` derived, with what it was derived from. It holds the secret the
/// credentials already hold in memory, and the key derived from it, nothing else.
private final class SigningKeys: Sendable {
    struct Scope: Equatable, Sendable {
        var date: String
        var secret: String
        var region: String
        var service: String
    }

    let last = LockedValue<(scope: Scope, key: SymmetricKey)?>(nil)
}
