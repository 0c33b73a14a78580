import Foundation

/// A Data Protection class: when the content of a file can be read and written on a device with a passcode.
///
/// Apple platforms encrypt each file with a key that the class makes available or not; the queue gives
/// its folders and files the class of ``AttachmentQueue/Configuration/fileProtection``. It maps one to one to
/// Foundation's `FileProtectionType`. Linux has no such classes: there the value is carried but changes
/// nothing.
public enum FileProtection: Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Readable and writable at any time, even before the first unlock after a restart.
    case none
    /// Readable and writable only while the device is unlocked: transfers of such files stop a few seconds
    /// after the device locks.
    case complete
    /// Files may be created while the device is locked, and a file open when it locked stays usable; once
    /// closed, it opens again only while unlocked.
    case completeUnlessOpen
    /// Unreadable from a restart until the user first unlocks the device, then readable and writable even
    /// while it is locked: what lets transfers run in the background with the screen off.
    case completeUntilFirstUserAuthentication

    /// The class's name as Foundation spells it.
    public var description: String {
        switch self {
        case .none: "none"
        case .complete: "complete"
        case .completeUnlessOpen: "completeUnlessOpen"
        case .completeUntilFirstUserAuthentication: "completeUntilFirstUserAuthentication"
        }
    }
}
