/// When startup checks the files of synced and archived attachments against their records, and removes
/// the files a crash left behind (see ``AttachmentQueue/Configuration/startupFileCheck``).
///
/// Startup always checks the queued attachments before ``AttachmentQueue/waitForInit()`` returns: an
/// interrupted save is completed, an upload whose file was lost is given up, a pending delete's file is
/// removed, so that no transfer ever starts from a record that disagrees with the disk. What this setting
/// moves is the rest, which grows with the table: one read of every record and one listing of the
/// attachments directory (120–250 ms at 100,000 records on the benchmarks' machine), after which a synced
/// attachment whose file is missing is queued for download again, an archived one lets go of its file, and
/// leftovers (temporary files, files of saves that never committed, files no record claims) are removed.
///
/// In the background, the queue accepts saves and runs transfers meanwhile; the check leaves alone the
/// records and files of attachments the queue saves, downloads or transfers after it began (it checks them
/// again at the next startup; only the spare staging name a save that committed before a crash left beside
/// its file goes, unless a save of that id is running), and each record it changes is changed only if it
/// is still as read.
/// ``AttachmentQueue/waitForStartupCheck()`` waits for it to finish.
///
/// Only with local files the queue reaches as plain files (the default ``FileManagerStorageAdapter``); with
/// another ``LocalStorageAdapter`` the check always runs before the queue is ready.
///
/// ```swift
/// var configuration = AttachmentQueue.Configuration(attachmentsDirectory: directory)
/// configuration.startupFileCheck = .inBackground
/// ```
public enum StartupFileCheck: Sendable, Hashable {
    /// Everything is checked before ``AttachmentQueue/waitForInit()`` returns.
    case beforeReady
    /// The synced and archived attachments and the leftovers are checked after
    /// ``AttachmentQueue/waitForInit()`` returns, in the background.
    case inBackground
    /// ``beforeReady`` for a table of at most `backgroundAbove` records, ``inBackground`` for a larger one.
    /// Counting the records costs a few milliseconds at 100,000.
    case automatic(backgroundAbove: Int)
}
