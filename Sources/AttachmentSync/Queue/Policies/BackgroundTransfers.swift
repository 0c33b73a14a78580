import Foundation

/// Which transfers a queue hands to a ``BackgroundTransferService`` (a background `URLSession` on Apple
/// platforms), so that they go on while the app is suspended or terminated.
///
/// A transfer goes to the service when the remote can form its request ahead of time
/// (``BackgroundTransferForming``: `S3RemoteStorage` and `PresignedRemoteStorage` in AttachmentSyncHTTP),
/// its direction is switched on here, and its size is at least ``minimumBytes``. Everything else runs in the
/// process as before: deletes, downloads asked for with ``AttachmentQueue/download(attachmentId:)`` and
/// transfers an app raised (someone waits for those: the system may start a background transfer minutes
/// later), content kept by a ``LocalStorageAdapter`` that transforms it, and files too large for one request.
///
/// The queue records every hand-off in its database before the service gets it, and adopts each result once,
/// in this process or after a relaunch: an upload counts as done only once the remote holds an object of
/// the right size and SHA-256; a download is verified and put in place as an in-process one is. A hand-off
/// the service lost (neither running nor reported after ``recoveryDelay``) is run again.
///
/// ```swift
/// var configuration = AttachmentQueue.Configuration(attachmentsDirectory: directory)
/// configuration.backgroundTransfers = BackgroundTransfers(service: service)
/// ```
public struct BackgroundTransfers: Sendable {
    /// The service the transfers are handed to.
    public var service: any BackgroundTransferService
    /// Whether uploads go to the service. The default is `true`.
    public var uploads: Bool = true
    /// Whether downloads the queue starts itself (eager ones, those of the download policy) go to the
    /// service. The default is `true`.
    public var downloads: Bool = true
    /// The smallest file, in bytes, that goes to the service: smaller ones finish faster in the process
    /// than the system schedules a background transfer. A download whose size is not known goes only when
    /// this is 0. The default is 0: every size.
    public var minimumBytes: Int64 = 0
    /// How long a hand-off may stay unaccounted for (the service neither runs it nor reports a result)
    /// before the queue takes it back and runs it again; an upload is first looked for on the remote. It
    /// covers a process that ended between recording a hand-off and handing it over, and a service that lost
    /// a transfer. The default is 5 minutes.
    public var recoveryDelay: Duration = .seconds(300)

    /// Hands transfers to `service`, with the defaults for everything else.
    public init(service: any BackgroundTransferService) {
        self.service = service
    }

    /// Throws ``AttachmentError/Code-swift.struct/invalidConfiguration`` naming a value out of range.
    func validate() throws {
        guard minimumBytes >= 0 else {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "backgroundTransfers.minimumBytes is negative: \(minimumBytes)",
                name: "backgroundTransfers.minimumBytes")
        }
        guard recoveryDelay >= .zero else {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "backgroundTransfers.recoveryDelay is negative: \(recoveryDelay)",
                name: "backgroundTransfers.recoveryDelay")
        }
    }
}
