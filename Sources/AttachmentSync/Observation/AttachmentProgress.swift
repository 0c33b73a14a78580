import Foundation

/// One update of an attachment's transfer, from ``AttachmentQueue/progress(attachmentId:)`` and
/// ``QueueStatus/transfers``.
///
/// Updates of a transfer come in order, with ``completedBytes`` never going down; the last one has a final
/// ``status`` (``Status/finished``, ``Status/failed(_:)`` or ``Status/cancelled``).
public struct AttachmentProgress: Sendable, CustomStringConvertible {
    /// Which way the bytes move.
    public enum Direction: Sendable, Hashable {
        /// From this device to remote storage.
        case upload
        /// From remote storage to this device.
        case download
    }

    /// Where the transfer stands.
    public enum Status: Sendable, CustomStringConvertible {
        /// Bytes are moving.
        case transferring
        /// Done: the content is uploaded, or on disk and verified.
        case finished
        /// Failed with this error; the queue retries it later unless it gave up (see
        /// ``AttachmentQueue/events``).
        case failed(AttachmentError)
        /// Stopped before the end: by ``AttachmentQueue/stopSync()``, by a cancelled
        /// ``AttachmentQueue/download(attachmentId:)``, or because the attachment changed meanwhile.
        case cancelled
        /// Handed to the background transfer service (see
        /// ``AttachmentQueue/Configuration/backgroundTransfers``): the bytes move outside this process, which
        /// sees no progress of them; the ``AttachmentQueue/events`` tell when the result is adopted.
        case handedOff

        /// Whether this is the transfer's last update.
        public var isFinal: Bool {
            if case .transferring = self { return false }
            return true
        }

        /// `transferring`, `finished`, `failed(<code>)`, `cancelled` or `handedOff`.
        public var description: String {
            switch self {
            case .transferring: "transferring"
            case .finished: "finished"
            case .failed(let error): "failed(\(error.code))"
            case .cancelled: "cancelled"
            case .handedOff: "handedOff"
            }
        }
    }

    /// The attachment's id.
    public var attachmentId: String
    /// Upload or download.
    public var direction: Direction
    /// Bytes done so far (for a resumed download, counting the bytes it started with).
    public var completedBytes: Int64
    /// The content's size, when known.
    public var totalBytes: Int64?
    /// Where the transfer stands.
    public var status: Status

    /// Creates an update.
    public init(
        attachmentId: String, direction: Direction, completedBytes: Int64, totalBytes: Int64?, status: Status
    ) {
        self.attachmentId = attachmentId
        self.direction = direction
        self.completedBytes = completedBytes
        self.totalBytes = totalBytes
        self.status = status
    }

    /// The fraction done, from 0 to 1, when the total is known (1 for an empty file).
    public var fractionCompleted: Double? {
        TransferProgress(completedBytes: completedBytes, totalBytes: totalBytes).fractionCompleted
    }

    /// `<id> <direction> <done>/<total> <status>`, for logs.
    public var description: String {
        "\(attachmentId) \(direction) \(completedBytes)/\(totalBytes.map(String.init) ?? "?") \(status)"
    }
}
