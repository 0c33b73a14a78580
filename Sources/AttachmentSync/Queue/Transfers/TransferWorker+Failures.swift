import Foundation

/// How a transfer's worker tells what kind of failure it ran into: facts for the state machine's decision
/// (see ``FailurePolicy``), found by looking at the error and, where the error cannot say, at the files.
extension TransferWorker {
    /// Finds out what kind of failure `error` is (see ``TransferFailure/Kind``), asking the error handler
    /// when its verdict matters: not for failures that spend no attempt (the local files out of reach, the
    /// network's) nor for a conflict, which trying again cannot help. Decides nothing and writes nothing.
    func classify(
        _ record: AttachmentRecord, _ attachment: Attachment, _ error: any Error
    ) async -> TransferFailure {
        let code = (error as? AttachmentError)?.code
        if record.state == .queuedUpload, code == .conflict {
            return TransferFailure(error: error, kind: .conflict)
        }
        // A key the device does not have (yet): no attempt, never given up; the error names the key.
        if code == .keyUnavailable {
            return TransferFailure(error: error, kind: .keyUnavailable)
        }
        if (try? localFilesOutOfReach(record, attachment, error)) ?? true {
            return TransferFailure(error: error, kind: .localFilesOutOfReach)
        }
        if !network.withLock({ $0.isReachable }) {
            return TransferFailure(error: error, kind: .networkGone)
        }
        if Self.isConnectivityFailure(error) {
            return TransferFailure(error: error, kind: .noAnswer)
        }
        var handlerRetries = true
        if let handler = errorHandler {
            handlerRetries = await handler.shouldRetry(
                attachment: attachment, error: error, attempt: record.attempts + 1)
        }
        if record.state == .queuedDownload, code == .remoteNotFound {
            return TransferFailure(error: error, kind: .notUploadedYet(handlerRetries: handlerRetries))
        }
        return TransferFailure(error: error, kind: .other(handlerRetries: handlerRetries))
    }

    /// Whether a transfer failed because its local files were out of reach: the error is a file system
    /// error (other than "no such file") about a path in the attachments directory, or, as adapters may
    /// report such failures in their own words, the file (an upload's) or its place (a download's) cannot
    /// be looked at or read now. Throws when the look itself fails in another way.
    private func localFilesOutOfReach(
        _ record: AttachmentRecord, _ attachment: Attachment, _ error: any Error
    ) throws -> Bool {
        if Self.isLocalFileSystemFailure(error, inside: directoryPath) { return true }
        do {
            if record.state == .queuedUpload, let path = attachment.localUri {
                if try files.info(atPath: path) != nil { try files.openForReading(atPath: path).close() }
            } else {
                _ = try files.info(atPath: FileName.join(directoryPath, try record.localName()))
            }
            return false
        } catch {
            return Self.isLocalFileSystemFailure(error, inside: directoryPath)
        }
    }

    /// Whether `error` is a file system error about a path in `directory` (or the folder itself) for
    /// another reason than "no such file": the file may be there, out of reach for now.
    static func isLocalFileSystemFailure(_ error: any Error, inside directory: String) -> Bool {
        guard let error = error as? AttachmentError, error.code == .fileSystem else { return false }
        if let path = error.path {
            let folder = directory.hasSuffix("/") ? String(directory.dropLast()) : directory
            guard path == folder || path.hasPrefix(folder + "/") else { return false }
        }
        if let posix = error.underlying as? POSIXError, posix.code == .ENOENT { return false }
        if let cocoa = error.underlying as? CocoaError,
            cocoa.code == .fileNoSuchFile || cocoa.code == .fileReadNoSuchFile
        {
            return false
        }
        return true
    }

    /// Whether `error` says remote storage could not be reached (no answer at all), rather than that it
    /// answered with a failure: `remoteUnavailable` without an HTTP answer behind it (no overload signal, no
    /// `Retry-After`), or a `URLError`.
    static func isConnectivityFailure(_ error: any Error) -> Bool {
        if error is URLError { return true }
        guard let error = error as? AttachmentError, error.code == .remoteUnavailable, error.retryAfter == nil
        else { return false }
        return !(error.underlying is any RemoteOverloadSignal)
    }
}
