/// Decides, for each attachment the app's rows refer to, whether the queue downloads it as soon as it
/// appears (eagerly) or only when asked with ``AttachmentQueue/download(attachmentId:)`` (on demand).
///
/// An on-demand attachment still gets its record at once, with its metadata, in state
/// ``AttachmentState/synced`` and without content (``Attachment/contentAvailable`` is `false`).
///
/// ```swift
/// // Photos at once, videos when the user opens them.
/// configuration.downloadPolicy = .custom { item in
///     item.mediaType?.hasPrefix("video/") == true ? .onDemand : .eager
/// }
/// ```
public struct DownloadPolicy: Sendable {
    /// When an attachment's content is fetched.
    public enum Mode: Sendable, Hashable {
        /// As soon as a row refers to it: the PowerSync helpers' behaviour.
        case eager
        /// Only when ``AttachmentQueue/download(attachmentId:)`` asks for it.
        case onDemand
    }

    private let decide: @Sendable (WatchedAttachmentItem) -> Mode
    /// The mode of every item, for the two fixed policies; `nil` for a custom one.
    let fixedMode: Mode?

    /// A policy that asks `decide` for each newly watched attachment (its id, filename, media type and
    /// metadata). It is called on the queue's reconcile path, once per new item: keep it fast and pure.
    public static func custom(_ decide: @escaping @Sendable (WatchedAttachmentItem) -> Mode) -> DownloadPolicy {
        DownloadPolicy(decide: decide, fixedMode: nil)
    }

    /// Every attachment is downloaded as soon as a row refers to it.
    public static let eager = DownloadPolicy(decide: { _ in .eager }, fixedMode: .eager)

    /// No attachment is downloaded until asked for.
    public static let onDemand = DownloadPolicy(decide: { _ in .onDemand }, fixedMode: .onDemand)

    /// The mode for `item`.
    public func mode(for item: WatchedAttachmentItem) -> Mode {
        decide(item)
    }
}
