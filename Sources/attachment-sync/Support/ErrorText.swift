import AttachmentSync
import AttachmentSyncS3
import Foundation

/// Errors as the CLI prints them: one line a person can act on, each fact said once, no Swift type names;
/// for refused credentials, what to check.
enum ErrorText {
    /// `error` for people. `database` is the database file the command was reading, named when SQLite's
    /// message does not (`file is not a database`).
    static func describe(_ error: any Error, database: String? = nil) -> String {
        switch error {
        case let error as AttachmentError:
            var text = error.message
            if let underlying = error.underlying {
                let detail = describe(underlying)
                if !text.contains(detail) { text += " (\(detail))" }
            }
            if error.code == .accessDenied, let hint = credentialsHint(for: error) { text += "; " + hint }
            return text
        case let error as LocalDatabaseError:
            let path = error.path ?? database
            guard let path, !error.message.contains(path) else { return error.message }
            return "\(path): \(error.message)"
        case let error as DemoFailure:
            return error.description
        default:
            return "\(error)"
        }
    }

    /// What to check when a server refused the credentials: where each kind of remote reads them from.
    static func credentialsHint(for error: AttachmentError) -> String? {
        guard let http = error.underlying as? RemoteHTTPError, http.statusCode == 401 || http.statusCode == 403
        else { return nil }
        if error.message.hasPrefix("S3 ") {
            return "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary "
                + "credentials), that they may use this bucket, and that this machine's clock is right"
        }
        return "check ATTACHMENT_SYNC_HTTP_TOKEN (sent as a bearer token) and that it may use this folder"
    }
}
