import Foundation

/// Something that happened to one attachment, from ``AttachmentQueue/events``.
public enum AttachmentEvent: Sendable, CustomStringConvertible {
    /// The content reached remote storage (`bytes` long).
    case uploaded(attachmentId: String, bytes: Int64)
    /// The content is on this device and verified (`bytes` long).
    case downloaded(attachmentId: String, bytes: Int64)
    /// The remote copy and the record are gone, after ``AttachmentQueue/deleteFile(attachmentId:updateHook:)``.
    case deleted(attachmentId: String)
    /// No row refers to the attachment any more; its record is archived (its content may stay cached).
    case archived(attachmentId: String)
    /// The local content was removed to respect ``AttachmentQueue/Configuration/archivedCacheLimit`` or
    /// ``AttachmentQueue/Configuration/maxCacheBytes``. An archived attachment's record went with it; an
    /// on-demand attachment's record stays, remote-only.
    case evicted(attachmentId: String, bytes: Int64)
    /// The local content was removed by ``AttachmentQueue/purge(attachmentId:)``; the record stays,
    /// remote-only.
    case purged(attachmentId: String)
    /// A transfer failed for the `attempt`-th time in a row; it is retried at `retryAt` (or at the next
    /// sync pass when `nil`).
    case failed(attachmentId: String, error: AttachmentError, attempt: Int, retryAt: Date?)
    /// A transfer failed and will not be retried: the error handler said so, or
    /// ``AttachmentQueue/Configuration/maxAttempts`` was reached, or the file to upload is gone. The
    /// attachment is archived.
    case gaveUp(attachmentId: String, error: AttachmentError, attempts: Int)
    /// The transfer was handed to the background transfer service (see
    /// ``AttachmentQueue/Configuration/backgroundTransfers``); `uploaded`, `downloaded` or `failed` follows
    /// when its result is adopted, in this process or after a relaunch.
    case handedOff(attachmentId: String)

    /// The attachment the event is about.
    public var attachmentId: String {
        switch self {
        case .uploaded(let id, _), .downloaded(let id, _), .deleted(let id), .archived(let id), .evicted(let id, _),
            .purged(let id), .failed(let id, _, _, _), .gaveUp(let id, _, _), .handedOff(let id):
            id
        }
    }

    /// A short line for logs: the event's name, the attachment's id and the details.
    public var description: String {
        switch self {
        case .uploaded(let id, let bytes): "uploaded \(id) (\(bytes) bytes)"
        case .downloaded(let id, let bytes): "downloaded \(id) (\(bytes) bytes)"
        case .deleted(let id): "deleted \(id)"
        case .archived(let id): "archived \(id)"
        case .evicted(let id, let bytes): "evicted \(id) (\(bytes) bytes)"
        case .purged(let id): "purged \(id)"
        case .failed(let id, let error, let attempt, _): "failed \(id) (attempt \(attempt)): \(error.code)"
        case .gaveUp(let id, let error, let attempts): "gave up \(id) after \(attempts) attempts: \(error.code)"
        case .handedOff(let id): "handed off \(id)"
        }
    }
}

extension AttachmentError {
    /// `error` as an ``AttachmentError`` about `attachmentId`: itself when it is one, else wrapped, with
    /// network errors as ``Code-swift.struct/remoteUnavailable`` and others as
    /// ``Code-swift.struct/remoteFailure``.
    static func wrapping(_ error: any Error, attachmentId: String) -> AttachmentError {
        if var attachmentError = error as? AttachmentError {
            if attachmentError.attachmentId == nil { attachmentError.attachmentId = attachmentId }
            return attachmentError
        }
        let isNetwork = error is URLError || (error as NSError).domain == NSURLErrorDomain
        return AttachmentError(
            code: isNetwork ? .remoteUnavailable : .remoteFailure,
            message: "the transfer failed: \(error)",
            attachmentId: attachmentId,
            underlying: error)
    }
}
