import ArgumentParser
import AttachmentSync
import AttachmentSyncS3
import Foundation

/// The `--remote` and `--endpoint` options the operating commands share, in one syntax:
///
/// - a folder path (or a `file://` URL): ``FileSystemRemoteStorage``;
/// - `s3://bucket/prefix`, with `--endpoint` for a server other than AWS: ``S3RemoteStorage``, credentials
///   from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`), region from `AWS_REGION`;
/// - an `http://` or `https://` folder URL: ``HTTPRemoteStorage`` (WebDAV for listing), with
///   `ATTACHMENT_SYNC_HTTP_TOKEN` sent as a bearer token when it is set.
///
/// Credentials come from the environment only and are never printed.
struct RemoteOptions: ParsableArguments {
    static let syntax = """
        REMOTE is a folder path, s3://BUCKET/PREFIX (with --endpoint for a server other than AWS; credentials \
        from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, region from AWS_REGION), or an \
        http(s):// WebDAV folder URL (ATTACHMENT_SYNC_HTTP_TOKEN, when set, is sent as a bearer token). \
        Credentials are read from the environment only and never printed.
        """

    @Option(
        help: ArgumentHelp(
            "The app's remote storage: a folder, s3://bucket/prefix or an http(s):// WebDAV folder.",
            valueName: "remote"))
    var remote: String?

    @Option(
        help: ArgumentHelp(
            "The S3 server for an s3:// remote (as http(s)://host:port). The default is AWS in AWS_REGION.",
            valueName: "url"))
    var endpoint: String?
}

/// A remote the operating commands opened, and how to let it go.
struct OpenedRemote: Sendable {
    /// The adapter, able to list and describe files.
    let storage: any ListableRemoteStorage
    /// How the remote is named in output: the location without credentials.
    let description: String
    private let shutdownAction: @Sendable () async -> Void

    /// Opens `options.remote`, reading credentials from `environment`.
    ///
    /// - Throws: `ValidationError` naming the problem (exit status 64).
    init(_ options: RemoteOptions, environment: [String: String], stateDirectory: URL) throws {
        guard let text = options.remote else { throw ValidationError("--remote is missing") }
        let lowered = text.lowercased()
        if lowered.hasPrefix("s3://") {
            let location = try S3Location(text, endpoint: options.endpoint, environment: environment)
            var configuration = S3RemoteStorage.Configuration(
                endpoint: location.endpoint, region: location.region, bucket: location.bucket,
                credentials: .environment, keyPrefix: location.prefix,
                addressing: options.endpoint == nil ? .virtualHost : .path)
            configuration.stateDirectory = stateDirectory
            let s3 = try S3RemoteStorage(configuration: configuration)
            storage = s3
            description = "s3://\(location.bucket)/\(location.prefix)"
            shutdownAction = { try? await s3.shutdown() }
            return
        }
        guard options.endpoint == nil else {
            throw ValidationError("--endpoint goes with an s3:// remote only, and the remote is \(Self.redacted(text))")
        }
        if lowered.hasPrefix("http://") || lowered.hasPrefix("https://") {
            guard let components = URLComponents(string: text), components.user == nil, components.password == nil,
                components.query == nil, components.fragment == nil, let url = components.url,
                HTTPURL.isServer(scheme: components.scheme, host: components.host)
            else {
                throw ValidationError(
                    "--remote \(Self.redacted(text)) is not an http(s) folder URL like https://files.example.com/attachments "
                        + "(no credentials, query or fragment in it: a token comes from ATTACHMENT_SYNC_HTTP_TOKEN)")
            }
            let token = environment["ATTACHMENT_SYNC_HTTP_TOKEN"] ?? ""
            let http = try HTTPRemoteStorage(
                configuration: .init(
                    baseURL: url,
                    headers: { token.isEmpty ? [] : [("Authorization", "Bearer \(token)")] }))
            storage = http
            description = url.absoluteString
            shutdownAction = { try? await http.shutdown() }
            return
        }
        if let scheme = URLComponents(string: text)?.scheme, scheme.count > 1, scheme.lowercased() != "file" {
            throw ValidationError(
                "--remote \(Self.redacted(text)) has the scheme \(scheme):, which is not one of s3://, http(s):// "
                    + "or file:// (or a plain folder path)")
        }
        let path = lowered.hasPrefix("file://") ? (URL(string: text)?.path ?? "") : text
        guard !path.isEmpty else { throw ValidationError("--remote \(String(reflecting: text)) names no folder") }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw ValidationError("--remote \(String(reflecting: path)) is not a folder")
        }
        storage = FileSystemRemoteStorage(directory: path)
        description = path
        shutdownAction = {}
    }

    /// Opens `options.remote` for `command` with the process's environment; a bad location is reported on
    /// standard error as the command's own and exits with status 64.
    static func open(_ options: RemoteOptions, command: String) throws -> OpenedRemote {
        do {
            return try OpenedRemote(
                options, environment: ProcessInfo.processInfo.environment,
                stateDirectory: FileManager.default.temporaryDirectory.appendingPathComponent("attachment-sync-cli"))
        } catch let error as ValidationError {
            FileHandle.standardError.write(Data("attachment-sync \(command): \(error.message)\n".utf8))
            throw ExitCode(64)
        } catch {
            FileHandle.standardError.write(Data("attachment-sync \(command): \(StatusCommand.describe(error))\n".utf8))
            throw ExitCode(64)
        }
    }

    /// Shuts the adapter's HTTP client down, if it has one.
    func shutdown() async {
        await shutdownAction()
    }

    /// `text` for a message: a URL without its user, password and query (which may hold credentials).
    static func redacted(_ text: String) -> String {
        guard var components = URLComponents(string: text), components.scheme != nil else {
            return String(reflecting: text)
        }
        components.user = nil
        components.password = nil
        components.query = nil
        components.fragment = nil
        return String(reflecting: components.string ?? "")
    }
}

/// `s3://bucket/prefix` with an optional `--endpoint`.
struct S3Location: Sendable {
    let endpoint: URL
    let bucket: String
    /// `""`, or the path after the bucket ending in `/`.
    let prefix: String
    let region: String

    init(_ text: String, endpoint: String?, environment: [String: String]) throws {
        guard let components = URLComponents(string: text), components.user == nil, components.password == nil,
            components.query == nil, components.fragment == nil, components.port == nil,
            let bucket = components.host, !bucket.isEmpty
        else {
            throw ValidationError(
                "--remote \(OpenedRemote.redacted(text)) is not an S3 location like s3://bucket-name/prefix")
        }
        try AWSEnvironment.requireValidBucketName(bucket, for: "--remote")
        try AWSEnvironment.requireCredentials(in: environment, for: "an s3:// remote")
        region = AWSEnvironment.region(in: environment)
        if let endpoint {
            guard let url = URL(string: endpoint), let parts = URLComponents(string: endpoint),
                HTTPURL.isServer(scheme: parts.scheme, host: parts.host), parts.user == nil, parts.password == nil,
                parts.query == nil, parts.path.isEmpty || parts.path == "/"
            else {
                throw ValidationError(
                    "--endpoint \(OpenedRemote.redacted(endpoint)) is not a server URL like http://127.0.0.1:7480")
            }
            self.endpoint = url
        } else {
            guard let url = URL(string: "https://s3.\(region).amazonaws.com") else {
                throw ValidationError("AWS_REGION \(String(reflecting: region)) cannot name an AWS endpoint")
            }
            self.endpoint = url
        }
        self.bucket = bucket
        prefix = components.path.split(separator: "/", omittingEmptySubsequences: true).map { $0 + "/" }.joined()
    }
}

/// What the S3 options need: the AWS variables the commands read credentials and the region from, and a valid
/// bucket name.
enum AWSEnvironment {
    /// Throws `ValidationError` naming the first of `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` that is
    /// not set; `what` says what needs them (`--s3`, say).
    static func requireCredentials(in environment: [String: String], for what: String) throws {
        for name in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] where (environment[name] ?? "").isEmpty {
            throw ValidationError(
                "\(what) takes its credentials from the environment, and \(name) is not set: set "
                    + "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary "
                    + "credentials; AWS_REGION defaults to us-east-1).")
        }
    }

    /// Throws `ValidationError` unless S3 accepts `name` as a bucket name: 3 to 63 lowercase letters, digits,
    /// dots and hyphens, starting and ending with a letter or a digit; `what` names the option (`--s3`, say).
    static func requireValidBucketName(_ name: String, for what: String) throws {
        let allowed = Set("abcdefghijklmnopqrstuvwxyz0123456789.-")
        let letterOrDigit = Set("abcdefghijklmnopqrstuvwxyz0123456789")
        guard (3...63).contains(name.count), name.allSatisfy(allowed.contains),
            let first = name.first, letterOrDigit.contains(first), let last = name.last, letterOrDigit.contains(last)
        else {
            throw ValidationError(
                "\(what) bucket name \(String(reflecting: name)) is not valid: use 3 to 63 lowercase letters, digits, "
                    + "dots and hyphens, starting and ending with a letter or a digit.")
        }
    }

    /// `AWS_REGION`, or `us-east-1` when it is not set.
    static func region(in environment: [String: String]) -> String {
        let region = environment["AWS_REGION"] ?? ""
        return region.isEmpty ? "us-east-1" : region
    }
}
