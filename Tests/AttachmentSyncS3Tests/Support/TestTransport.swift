import AttachmentSyncHTTP
import AttachmentSyncS3
import Testing

/// The transports the adapters' tests run on: each one must keep the same contract.
enum TestTransport: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case asyncHTTPClient
    case urlSession

    var transport: RemoteTransport {
        switch self {
        case .asyncHTTPClient: .asyncHTTPClient()
        case .urlSession: .urlSession()
        }
    }

    var testDescription: String { rawValue }
}
