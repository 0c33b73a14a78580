import ArgumentParser
import AttachmentSyncS3
import Foundation

/// Where `demo --s3 URL` puts the photos: the server, the bucket and an optional key prefix, read from a
/// path-style URL (`http://127.0.0.1:7480/bucket-name/optional/prefix`), with the credentials and region
/// from the environment.
struct DemoS3Location: Sendable {
    /// An example of the URL, for messages.
    static let example = "http://127.0.0.1:7480/bucket-name"

    /// The server's base URL: scheme, host and port.
    let endpoint: URL
    /// The bucket, the URL's first path component.
    let bucket: String
    /// The key prefix the URL names after the bucket: `""`, or path components ending in `/`.
    let prefix: String
    /// `AWS_REGION`, or `us-east-1` when it is not set.
    let region: String

    /// Reads `text` and checks that `environment` has credentials.
    ///
    /// - Throws: `ValidationError` naming the problem: not an http(s) URL, no bucket, a bucket name S3 does
    ///   not accept, credentials, a query or a fragment in the URL, or a credential variable not set.
    init(url text: String, environment: [String: String]) throws {
        guard let components = URLComponents(string: text), components.user == nil, components.password == nil
        else {
            // Not echoed: the text may hold a password.
            throw ValidationError(
                "--s3 must be a URL like \(Self.example), without credentials in it (they come from "
                    + "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY).")
        }
        guard HTTPURL.isServer(scheme: components.scheme, host: components.host) else {
            throw ValidationError(
                "--s3 must be an http or https URL like \(Self.example) (the server, then the bucket), "
                    + "not \(String(reflecting: text)).")
        }
        guard components.query == nil, components.fragment == nil else {
            throw ValidationError("--s3 must not have a query or a fragment: use a URL like \(Self.example).")
        }
        let path = components.path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard let bucket = path.first else {
            throw ValidationError(
                "--s3 names no bucket: add it as the first path component, as in \(Self.example).")
        }
        try AWSEnvironment.requireValidBucketName(bucket, for: "--s3")
        try AWSEnvironment.requireCredentials(in: environment, for: "--s3")
        var base = components
        base.path = ""
        guard let endpoint = base.url else {
            throw ValidationError("--s3 must be a URL like \(Self.example), not \(String(reflecting: text)).")
        }
        self.endpoint = endpoint
        self.bucket = bucket
        self.prefix = path.dropFirst().map { $0 + "/" }.joined()
        self.region = AWSEnvironment.region(in: environment)
    }
}
