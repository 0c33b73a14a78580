import Foundation

/// Runs `body` with a new queue and closes the queue when `body` returns or throws, so no transfer outlives
/// the scope and the database can be closed right after.
///
/// The queue is made with ``AttachmentQueue/init(db:remoteStorage:configuration:watchAttachments:localStorage:errorHandler:)``;
/// `body` starts it (``AttachmentQueue/startSync()``) if it wants background sync. Tools, tests and
/// server jobs that use a queue for one piece of work are its users; an app keeps its queue for its
/// lifetime instead.
///
/// ```swift
/// let uploaded = try await withAttachmentQueue(
///     db: db, remoteStorage: storage, configuration: .init(attachmentsDirectory: folder)
/// ) { queue in
///     let photo = try await queue.saveFile(data: jpeg, mediaType: "image/jpeg", fileExtension: "jpg")
///     try await queue.syncNow()
///     return try await queue.attachment(id: photo.id)
/// }
/// ```
///
/// - Parameters:
///   - db: The database holding the attachments table.
///   - remoteStorage: Where files are uploaded to and downloaded from.
///   - configuration: Directory, intervals, limits, clock and logger.
///   - watchAttachments: Makes the stream of attachments the app's rows refer to. The default is `nil`.
///   - localStorage: How files are stored on the device. The default is ``FileManagerStorageAdapter``.
///   - errorHandler: Decides between retrying and archiving after a failed transfer. The default is `nil`.
///   - isolation: The actor `body` runs on. The default is the caller's.
///   - body: The work to do with the queue.
/// - Returns: What `body` returns.
/// - Throws: What `body` throws (after the queue is closed).
public func withAttachmentQueue<Result>(
    db: LocalDatabase,
    remoteStorage: any RemoteStorageAdapter,
    configuration: AttachmentQueue.Configuration,
    watchAttachments: (@Sendable () throws -> AsyncThrowingStream<[WatchedAttachmentItem], any Error>)? = nil,
    localStorage: any LocalStorageAdapter = FileManagerStorageAdapter(),
    errorHandler: (any SyncErrorHandler)? = nil,
    isolation: isolated (any Actor)? = #isolation,
    _ body: (AttachmentQueue) async throws -> Result
) async throws -> Result {
    let queue = AttachmentQueue(
        db: db, remoteStorage: remoteStorage, configuration: configuration, watchAttachments: watchAttachments,
        localStorage: localStorage, errorHandler: errorHandler)
    do {
        let result = try await body(queue)
        await queue.close()
        return result
    } catch {
        await queue.close()
        throw error
    }
}
