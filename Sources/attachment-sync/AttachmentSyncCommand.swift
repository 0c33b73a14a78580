import ArgumentParser

/// The `attachment-sync` command line tool.
@main
struct AttachmentSyncCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attachment-sync",
        abstract: "Keep attachment files referenced by SQLite rows in sync with remote storage.",
        subcommands: [DemoCommand.self, StatusCommand.self, VerifyCommand.self, GCCommand.self, RotateKeysCommand.self]
    )
}
