import Foundation

/// The one check of the URLs the remotes (and the CLI) are given for a server.
package enum HTTPURL {
    /// Whether `url` is an `http` or `https` URL (either case) with a host.
    package static func isServer(_ url: URL) -> Bool {
        isServer(scheme: url.scheme, host: url.host)
    }

    /// Whether `scheme` is `http` or `https` (either case) and `host` is not empty.
    package static func isServer(scheme: String?, host: String?) -> Bool {
        guard let scheme = scheme?.lowercased(), scheme == "http" || scheme == "https" else { return false }
        return host.map { !$0.isEmpty } ?? false
    }
}
