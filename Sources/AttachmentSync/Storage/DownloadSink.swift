import Foundation

/// Where a download's bytes go instead of its file, when an adapter wrapping the one that downloads takes
/// them as they arrive (``EncryptedRemoteStorage`` decrypts them, so that the ciphertext of a large file
/// never reaches the disk).
///
/// The wrapper sets ``DownloadSinks/current`` around the wrapped adapter's download. An adapter that
/// supports it (the HTTP adapters, which say so with ``DownloadSinkAdapter``) asks ``accepts(total:from:)``
/// before it writes a response's body; when the answer is `true` it hands every byte of that body to
/// ``write(_:at:)`` instead of its file, and when the body fails it asks ``keep(upTo:)`` what its file now
/// holds (the file is then what the sink left there: the adapter does not write it). An adapter that never
/// asks writes its file as usual.
package protocol DownloadSink: Sendable {
    /// Whether the body of a response for an object of `total` bytes (`nil`: not known), written from byte
    /// `offset` of the file, comes to the sink. Asked before the body is written and before the file is cut
    /// for it; an answer `true` for `offset` 0 starts the sink's download over.
    func accepts(total: Int64?, from offset: Int64) -> Bool

    /// Bytes of the object at `offset`. Several tasks may write at once, at different offsets (the ranges of
    /// a parallel download), and the same bytes may come twice (a server that ignores ranges); throws when
    /// the download must stop.
    func write(_ bytes: Data, at offset: Int64) async throws

    /// The download failed after the sink took it (no write is in flight any more): the sink leaves in the
    /// file what a later try may resume from, and returns its size (0: nothing, start over). `end` is where
    /// the adapter would have cut its file (the bytes it handed on without a gap from the start), the answer
    /// of a sink that wrote them there as they came. Asked again, it answers the same and changes nothing.
    func keep(upTo end: Int64) -> Int64
}

/// The sink of the download running in this task, if any.
package enum DownloadSinks {
    /// The download's sink; `nil` when no wrapper takes its bytes.
    @TaskLocal package static var current: (any DownloadSink)?
}

/// An adapter whose downloads offer their bytes to ``DownloadSinks/current``.
package protocol DownloadSinkAdapter {}
