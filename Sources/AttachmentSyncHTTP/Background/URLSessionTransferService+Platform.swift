import AttachmentSync
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

// What differs between Apple platforms and Linux for URLSessionTransferService, in one place. Nothing under
// `#if canImport(Darwin)` is compiled by any build here: each line was checked against Apple's documentation
// of URLSessionConfiguration, URLRequest and URLSessionDelegate.

extension URLSessionTransferService {
    /// The session's configuration: a background one on Apple platforms, an ordinary one on Linux. No cache,
    /// no cookies, no stored credentials either way.
    static func sessionConfiguration(_ configuration: Configuration) -> URLSessionConfiguration {
        #if canImport(Darwin)
            let session = URLSessionConfiguration.background(withIdentifier: configuration.identifier)
            // Relaunch the app (in the background) when the session's tasks finish while it is not running.
            session.sessionSendsLaunchEvents = true
            session.isDiscretionary = configuration.isDiscretionary
            session.sharedContainerIdentifier = configuration.sharedContainerIdentifier
        #else
            let session = URLSessionConfiguration.default
        #endif
        session.urlCache = nil
        session.httpCookieStorage = nil
        session.httpShouldSetCookies = false
        session.urlCredentialStorage = nil
        session.requestCachePolicy = .reloadIgnoringLocalAndRemoteCacheData
        return session
    }

    /// Keeps a transfer that waits for an unmetered network off cellular and expensive networks and out of
    /// Low Data Mode (Apple platforms; Linux has no such notion and runs it on any network).
    static func restrictNetwork(_ request: inout URLRequest, unmetered: Bool) {
        #if canImport(Darwin)
            if unmetered {
                request.allowsExpensiveNetworkAccess = false
                request.allowsConstrainedNetworkAccess = false
            }
        #endif
    }
}

#if canImport(Darwin)
    extension URLSessionTransferDelegate {
        /// The session has delivered every event it held for the app (each result is in the folder by now,
        /// written by the callbacks before this one): the system's completion handler is called on the main
        /// actor, as it must be.
        func urlSessionDidFinishEvents(forBackgroundURLSession session: URLSession) {
            let events = events
            Task { @MainActor in events.finish() }
        }
    }
#endif
