import Crypto
import Foundation
import Testing

@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// The signer against AWS's published test suite (generic service) and against botocore (S3 requests).
@Suite struct SigV4SignerTests {
    // MARK: - AWS's SigV4 test suite

    /// Cases whose path has nothing to normalize: S3 signs them exactly as the generic service does.
    static let plainCases = [
        "get-header-key-duplicate", "get-header-value-multiline", "get-header-value-order", "get-header-value-trim",
        "get-space", "get-unreserved", "get-utf8", "get-vanilla", "get-vanilla-empty-query-key",
        "get-vanilla-query", "get-vanilla-query-order-key", "get-vanilla-query-order-key-case",
        "get-vanilla-query-order-value", "get-vanilla-query-unreserved", "get-vanilla-utf8-query",
        "post-header-key-case", "post-header-key-sort", "post-header-value-case", "post-sts-header-before",
        "post-vanilla", "post-vanilla-empty-query-value", "post-vanilla-query", "post-x-www-form-urlencoded",
        "post-x-www-form-urlencoded-parameters",
    ]

    /// Cases that resolve `.`/`..` or collapse `//`. S3 must not normalize (`a//b` and `a/./b` are distinct
    /// keys), so these are checked only in the normalizing mode that other AWS services use.
    static let normalizingCases = [
        "get-relative", "get-relative-relative", "get-slash", "get-slash-dot-slash", "get-slash-pointless-dot",
        "get-slashes",
    ]

    static let suiteDate = Date(timeIntervalSince1970: 1_440_938_160)  // 20150830T123600Z
    static let suiteCredentials = S3Credentials(
        accessKeyId: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")

    @Test("S3-mode signing matches AWS's test suite", arguments: plainCases)
    func s3ModeMatchesTestSuite(name: String) throws {
        let signer = SigV4Signer(
            region: "us-east-1", service: "service", normalizesPath: false, sendsContentSHA256: false)
        try checkSuiteCase(name, signer: signer)
    }

    @Test(
        "normalizing mode matches AWS's test suite, path normalization included",
        arguments: plainCases + normalizingCases)
    func normalizingModeMatchesTestSuite(name: String) throws {
        let signer = SigV4Signer(
            region: "us-east-1", service: "service", normalizesPath: true, sendsContentSHA256: false)
        try checkSuiteCase(name, signer: signer)
    }

    @Test("S3 mode keeps dot segments and repeated slashes in the signed path")
    func s3ModeDoesNotNormalize() {
        let signer = SigV4Signer(region: "us-east-1")
        let request = SigV4Signer.Request(
            method: "GET", path: "/bucket/a//b/./c/../d", headers: [("host", "example.com")])
        let signed = signer.sign(request, payload: .empty, credentials: Self.suiteCredentials, date: Self.suiteDate)
        #expect(signed.encodedPath == "/bucket/a//b/./c/../d")
        #expect(
            signed.canonicalRequest.split(separator: "\n", omittingEmptySubsequences: false)[1]
                == "/bucket/a//b/./c/../d")
    }

    @Test("the test suite's resources hold exactly the cases the tests use")
    func resourcesHoldTheUsedCases() throws {
        let folder = try Self.resources.appendingPathComponent("aws-sig-v4-test-suite")
        let entries = try FileManager.default.contentsOfDirectory(atPath: folder.path)
            .filter { !["LICENSE", "NOTICE", "README.md"].contains($0) }
        #expect(Set(entries) == Set(Self.plainCases + Self.normalizingCases))
    }

    private func checkSuiteCase(_ name: String, signer: SigV4Signer) throws {
        let folder = try Self.resources.appendingPathComponent("aws-sig-v4-test-suite/\(name)")
        func read(_ ext: String) throws -> String {
            try String(contentsOf: folder.appendingPathComponent("\(name).\(ext)"), encoding: .utf8)
        }
        let raw = try SuiteRequest(parsing: read("req"))
        let signed = signer.sign(
            raw.request, payload: .hashing(raw.body), credentials: Self.suiteCredentials, date: Self.suiteDate)
        #expect(signed.canonicalRequest == (try read("creq")), "canonical request of \(name)")
        switch name {
        case "post-x-www-form-urlencoded":
            // The suite's .sts and .authz of this case were computed without the content-length header that its
            // .req and .creq have (the SHA-256 of the .creq without it is the hash in the .sts): sign that.
            var withoutLength = raw.request
            withoutLength.headers.removeAll { $0.name.lowercased() == "content-length" }
            let resigned = signer.sign(
                withoutLength, payload: .hashing(raw.body), credentials: Self.suiteCredentials, date: Self.suiteDate)
            #expect(resigned.stringToSign == (try read("sts")), "string to sign of \(name)")
            #expect(resigned.authorization == (try read("authz")), "authorization of \(name)")
        case "post-x-www-form-urlencoded-parameters":
            // The suite's .sts of this case hashes another canonical request (`charset=utf8`, no content-length)
            // than its .creq, and its .authz signs content-length: they cannot all hold, so only the canonical
            // request is checked.
            break
        default:
            #expect(signed.stringToSign == (try read("sts")), "string to sign of \(name)")
            #expect(signed.authorization == (try read("authz")), "authorization of \(name)")
        }
    }

    @Test("one signer used across days, secrets and regions signs every request as a fresh signer does")
    func reusedSignerMatchesFreshOnes() {
        // The signer keeps the last signing key it derived: a change of day, secret or region must not
        // sign with a stale one.
        let request = SigV4Signer.Request(
            method: "GET", path: "/photo.jpg", headers: [("host", "examplebucket.s3.amazonaws.com")])
        let days = [
            Self.suiteDate, Self.suiteDate.addingTimeInterval(3_600), Self.suiteDate.addingTimeInterval(86_400),
        ]
        let secrets = ["wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "another-secret"]
        var reused = SigV4Signer(region: "us-east-1")
        var signatures: Set<String> = []
        for region in ["us-east-1", "eu-west-1"] {
            reused.region = region
            for secret in secrets {
                for day in days + days.reversed() {
                    let credentials = S3Credentials(accessKeyId: "AKIDEXAMPLE", secretAccessKey: secret)
                    let expected = SigV4Signer(region: region).sign(
                        request, payload: .empty, credentials: credentials, date: day)
                    let signed = reused.sign(request, payload: .empty, credentials: credentials, date: day)
                    #expect(signed.signature == expected.signature, "\(region), \(secret.prefix(4)), \(day)")
                    signatures.insert(signed.signature)
                }
            }
        }
        // Each day, secret and region signs differently (3 days of which 2 in one hour: 3 distinct times).
        #expect(signatures.count == 2 * 2 * 3)
    }

    // MARK: - botocore fixtures

    @Test("header signing of S3 requests matches botocore", arguments: try BotocoreFixtures.load().headerCases)
    func headerSigningMatchesBotocore(fixture: BotocoreFixtures.Case) throws {
        let fixtures = try BotocoreFixtures.load()
        let url = try #require(URL(string: fixture.base))
        let signer = SigV4Signer(region: fixture.region)
        let signed = signer.sign(
            fixture.request(host: Self.hostHeader(url)),
            payload: fixture.unsignedPayload ? .unsigned : .sha256(fixture.bodySHA256),
            credentials: fixtures.credentials(sessionToken: fixture.sessionToken), date: fixtures.date)
        #expect(signed.canonicalRequest == fixture.expected.canonicalRequest)
        #expect(signed.stringToSign == fixture.expected.stringToSign)
        #expect(signed.signature == fixture.expected.signature)
        #expect(signed.authorization == fixture.expected.authorization)
        let sentHash = signed.headers.first { $0.name == "x-amz-content-sha256" }?.value
        #expect(sentHash == fixture.expected.payloadHash)
    }

    @Test("presigned URLs match botocore's", arguments: try BotocoreFixtures.load().presignCases)
    func presignedURLsMatchBotocore(fixture: BotocoreFixtures.Case) throws {
        let fixtures = try BotocoreFixtures.load()
        let url = try #require(URL(string: fixture.base))
        let signer = SigV4Signer(region: fixture.region)
        let expires = try #require(fixture.presignExpires)
        let presigned = try signer.presign(
            fixture.request(host: Self.hostHeader(url)),
            credentials: fixtures.credentials(sessionToken: fixture.sessionToken), date: fixtures.date,
            expiresIn: .seconds(expires))
        #expect(presigned.canonicalRequest == fixture.expected.canonicalRequest)
        #expect(presigned.stringToSign == fixture.expected.stringToSign)
        #expect(presigned.signature == fixture.expected.signature)
        // botocore orders the query parameters differently; the same parameters and path must be there.
        let expectedText = try #require(fixture.expected.url)
        let expectedURL = try #require(URLComponents(string: expectedText))
        let ours = try #require(
            URLComponents(string: fixture.base + presigned.encodedPath + "?" + presigned.encodedQuery))
        #expect(ours.percentEncodedPath == expectedURL.percentEncodedPath)
        #expect(
            Set(ours.percentEncodedQuery?.split(separator: "&") ?? [])
                == Set(expectedURL.percentEncodedQuery?.split(separator: "&") ?? []))
    }

    @Test("a presigned URL's expiry must be between 1 second and 7 days")
    func presignRejectsOutOfRangeExpiry() {
        let signer = SigV4Signer(region: "us-east-1")
        let request = SigV4Signer.Request(method: "GET", path: "/b/k", headers: [("host", "example.com")])
        for expiry in [Duration.zero, .seconds(604_801)] {
            #expect(throws: (any Error).self) {
                try signer.presign(request, credentials: Self.suiteCredentials, date: Self.suiteDate, expiresIn: expiry)
            }
        }
    }

    @Test("credentials never print their secret or session token")
    func credentialsDescriptionsAreRedacted() {
        let credentials = S3Credentials(
            accessKeyId: "AKIDVISIBLE", secretAccessKey: "very-secret-key", sessionToken: "very-secret-token")
        var dumped = ""
        dump(credentials, to: &dumped)
        for text in [String(describing: credentials), String(reflecting: credentials), "\(credentials)", dumped] {
            #expect(text.contains("AKIDVISIBLE"))
            #expect(!text.contains("very-secret-key"))
            #expect(!text.contains("very-secret-token"))
        }
    }

    // MARK: - Helpers

    static var resources: URL {
        get throws {
            try #require(Bundle.module.url(forResource: "Resources", withExtension: nil))
        }
    }

    static func hostHeader(_ url: URL) -> String {
        guard let host = url.host else { return "" }
        let defaultPort = url.scheme == "https" ? 443 : 80
        if let port = url.port, port != defaultPort {
            return "\(host):\(port)"
        }
        return host
    }
}

/// A raw request of AWS's test suite (`.req`): request line, headers (a line starting with whitespace continues
/// the previous header as another value), a blank line, the body.
struct SuiteRequest {
    var request: SigV4Signer.Request
    var body: Data

    init(parsing text: String) throws {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let requestLine = try #require(lines.first)
        let method = String(requestLine.prefix { $0 != " " })
        let target = String(requestLine.dropFirst(method.count + 1).dropLast(" HTTP/1.1".count))
        let pathAndQuery = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        var query: [(name: String, value: String)] = []
        if pathAndQuery.count == 2 {
            for pair in pathAndQuery[1].split(separator: "&") {
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                query.append((String(parts[0]), parts.count == 2 ? String(parts[1]) : ""))
            }
        }
        var headers: [(name: String, value: String)] = []
        var index = 1
        while index < lines.count, !lines[index].isEmpty {
            let line = lines[index]
            if line.first == " " || line.first == "\t", let last = headers.last {
                headers.append((last.name, line.trimmingCharacters(in: .whitespaces)))
            } else if let colon = line.firstIndex(of: ":") {
                headers.append(
                    (
                        String(line[..<colon]),
                        String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
                    ))
            }
            index += 1
        }
        body = Data(lines.dropFirst(index + 1).joined(separator: "\n").utf8)
        request = SigV4Signer.Request(method: method, path: String(pathAndQuery[0]), query: query, headers: headers)
    }
}

/// The fixtures `scripts/gen-sigv4-fixtures.py` printed with botocore.
struct BotocoreFixtures: Decodable {
    struct Expected: Decodable, Sendable {
        var canonicalRequest: String
        var stringToSign: String
        var signature: String
        var authorization: String?
        var payloadHash: String?
        var url: String?
    }

    struct Case: Decodable, Sendable, CustomTestStringConvertible {
        var name: String
        var method: String
        var base: String
        var region: String
        var path: String
        var query: [[String]]
        var headers: [[String]]
        var bodySHA256: String
        var unsignedPayload: Bool
        var sessionToken: String?
        var presignExpires: Int64?
        var expected: Expected

        var testDescription: String { name }

        func request(host: String) -> SigV4Signer.Request {
            SigV4Signer.Request(
                method: method, path: path, query: query.map { ($0[0], $0[1]) },
                headers: [("host", host)] + headers.map { ($0[0], $0[1]) })
        }
    }

    var accessKeyId: String
    var secretAccessKey: String
    var signingTime: String
    var cases: [Case]

    var date: Date {
        ISO8601DateFormatter().date(from: signingTime) ?? Date(timeIntervalSince1970: 0)
    }

    var headerCases: [Case] { cases.filter { $0.presignExpires == nil } }
    var presignCases: [Case] { cases.filter { $0.presignExpires != nil } }

    func credentials(sessionToken: String?) -> S3Credentials {
        S3Credentials(accessKeyId: accessKeyId, secretAccessKey: secretAccessKey, sessionToken: sessionToken)
    }

    static func load() throws -> BotocoreFixtures {
        let url = try SigV4SignerTests.resources.appendingPathComponent("botocore-sigv4-fixtures.json")
        return try JSONDecoder().decode(BotocoreFixtures.self, from: Data(contentsOf: url))
    }
}
