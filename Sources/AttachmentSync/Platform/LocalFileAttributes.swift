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

    /// Sets the attributes on the file or folder at `path`, as Apple's "Encrypting Your App's Files" and
    /// `isExcludedFromBackupKey` documentation describe: the class with `FileManager`'s `protectionKey` on iOS,
    /// iPadOS, tvOS, watchOS and visionOS (their Simulators too), where Data Protection is a feature apps use,
    /// not on macOS or Mac Catalyst, whose volumes may not support classes; the backup exclusion with
    /// `URLResourceValues.isExcludedFromBackup` on every Apple platform (device backups, Time Machine).
    /// Linux has neither: nothing happens there.
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
