import Foundation

/// What the queue sets on a file or folder it made, besides its content: its Data Protection class and
/// whether backups include it. `nil` leaves that attribute as it is.
package struct LocalFileAttributes: Sendable, Hashable {
    package var protection: FileProtection?
    package var excludedFromBackup: Bool?

    package init(protection: FileProtection? = nil, excludedFromBackup: Bool? = nil) {
        self.protection = protection
        self.excludedFromBackup = excludedFromBackup
    }

    /// Whether the platform acts on ``protection``: on iOS, iPadOS, tvOS, watchOS and visionOS (their
    /// Simulators too), where Data Protection is a feature apps use. Not on macOS or Mac Catalyst, whose
    /// file systems may not support the classes (`FileManager` would fail), nor on Linux.
    package static let appliesProtection: Bool = {
        #if (os(iOS) || os(tvOS) || os(watchOS) || os(visionOS)) && !targetEnvironment(macCatalyst)
            true
        #else
            false
        #endif
    }()

    /// Whether the platform acts on ``excludedFromBackup``: on every Apple platform (iCloud and computer
    /// backups of iOS devices, Time Machine on macOS); Linux has no such attribute.
    package static let appliesBackupExclusion: Bool = {
        #if canImport(Darwin)
            true
        #else
            false
        #endif
    }()

    /// Sets the attributes on the file or folder at `path`: on Apple platforms with `FileManager`'s
    /// `protectionKey` attribute and `URLResourceValues.isExcludedFromBackup`, as Apple's "Encrypting Your
    /// App's Files" and `isExcludedFromBackupKey` documentation describe; elsewhere nothing.
    ///
    /// A class that cannot be set is an error (``AttachmentError/Code-swift.struct/fileSystem``), except in
    /// the Simulator, which does not enforce Data Protection.
    package func apply(atPath path: String) throws {
        #if (os(iOS) || os(tvOS) || os(watchOS) || os(visionOS)) && !targetEnvironment(macCatalyst)
            if let protection {
                do {
                    try FileManager.default.setAttributes(
                        [.protectionKey: protection.fileProtectionType], ofItemAtPath: path)
                } catch {
                    #if !targetEnvironment(simulator)
                        throw AttachmentError(
                            code: .fileSystem,
                            message: "cannot give \(path) the Data Protection class \(protection): "
                                + error.localizedDescription,
                            path: path, underlying: error)
                    #endif
                }
            }
        #endif
        #if canImport(Darwin)
            if let excludedFromBackup {
                var url = URL(fileURLWithPath: path)
                var values = URLResourceValues()
                values.isExcludedFromBackup = excludedFromBackup
                try fileSystem(path: path) { try url.setResourceValues(values) }
            }
        #endif
    }
}

#if (os(iOS) || os(tvOS) || os(watchOS) || os(visionOS)) && !targetEnvironment(macCatalyst)
    extension FileProtection {
        /// Foundation's value for the class.
        var fileProtectionType: FileProtectionType {
            switch self {
            case .none: .none
            case .complete: .complete
            case .completeUnlessOpen: .completeUnlessOpen
            case .completeUntilFirstUserAuthentication: .completeUntilFirstUserAuthentication
            }
        }
    }
#endif

extension FileOperations {
    package func setAttributes(_ attributes: LocalFileAttributes, atPath path: String) throws {
        try attributes.apply(atPath: path)
    }
}
