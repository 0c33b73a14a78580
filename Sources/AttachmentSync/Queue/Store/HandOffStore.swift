import Foundation

/// The queue's record of the transfers it handed to a ``BackgroundTransferService``: written before a
/// transfer is handed over, deleted in the transaction that adopts its result, so a crash at any point in
/// between loses nothing and no result is adopted twice.
///
/// Records live in a table of their own, `attachment_sync_handoffs`, keyed by the attachments table's name
/// (`scope`) and the hand-off's id; an attachment has at most one hand-off at a time.
struct HandOffStore: Sendable {
    /// The hand-offs table.
    static let table = "attachment_sync_handoffs"
    /// The attachments table's name, as given: the records' scope.
    let scope: String

    /// One transfer handed over (or about to be).
    struct HandOff: Sendable, Hashable {
        /// The ``BackgroundTransfer/id`` the service knows it by.
        var id: String
        var attachmentId: String
        var direction: BackgroundTransfer.Direction
        var request: PreparedRequest
        /// For an upload, the file sent: its name in the attachments directory.
        var bodyFileName: String?
        /// The size and SHA-256 the result must show: an upload's stored object, a download's file.
        var expectedSize: Int64?
        var sha256: String?
        /// Milliseconds since 1970.
        var createdAt: Int64

        /// The transfer to hand to the service, its body file in `directory`.
        func transfer(in directory: URL, requiresUnmeteredNetwork: Bool = false) -> BackgroundTransfer {
            BackgroundTransfer(
                id: id, direction: direction, request: request,
                bodyFile: bodyFileName.map { directory.appendingPathComponent($0) },
                requiresUnmeteredNetwork: requiresUnmeteredNetwork)
        }
    }

    /// Creates the table when it is missing. A rowid table: SQLite reports no changes of a `WITHOUT ROWID`
    /// table to GRDB's observation, and the queue's status watches this one.
    func createTable(in tx: SqlTransaction) throws {
        _ = try tx.execute(
            sql: """
                CREATE TABLE IF NOT EXISTS \(Self.table) (
                    scope TEXT NOT NULL, id TEXT NOT NULL, attachment_id TEXT NOT NULL, direction TEXT NOT NULL,
                    request TEXT NOT NULL, body_file TEXT, expected_size INTEGER, sha256 TEXT,
                    created_at INTEGER NOT NULL, PRIMARY KEY (scope, id), UNIQUE (scope, attachment_id)
                )
                """)
    }

    /// Records `handOff`; `false` when its attachment has a hand-off already (nothing is written then).
    func record(_ handOff: HandOff, in tx: SqlTransaction) throws -> Bool {
        let request = String(decoding: try JSONEncoder().encode(handOff.request), as: UTF8.self)
        let written = try tx.execute(
            sql: """
                INSERT OR IGNORE INTO \(Self.table)
                    (scope, id, attachment_id, direction, request, body_file, expected_size, sha256, created_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            parameters: [
                scope, handOff.id, handOff.attachmentId, handOff.direction.rawValue, request, handOff.bodyFileName,
                handOff.expectedSize, handOff.sha256, handOff.createdAt,
            ])
        return written == 1
    }

    /// The hand-off `id`, or `nil`.
    func handOff(id: String, in tx: SqlTransaction) throws -> HandOff? {
        try tx.getOptional(sql: "\(Self.select) AND id = ?", parameters: [scope, id], mapper: Self.handOff)
    }

    /// The attachment's hand-off, or `nil`.
    func handOff(ofAttachment attachmentId: String, in tx: SqlTransaction) throws -> HandOff? {
        try tx.getOptional(
            sql: "\(Self.select) AND attachment_id = ?", parameters: [scope, attachmentId], mapper: Self.handOff)
    }

    /// Every hand-off of this scope, oldest first.
    func handOffs(in tx: SqlTransaction) throws -> [HandOff] {
        try tx.getAll(sql: "\(Self.select) ORDER BY created_at, id", parameters: [scope], mapper: Self.handOff)
    }

    /// The names of the bodies written for uploads (see ``FileName/isWrittenBody(_:)``) that hand-offs of
    /// this scope send: startup's clean-up leaves them alone.
    func writtenBodies(in tx: SqlTransaction) throws -> Set<String> {
        let names = try tx.getAll(
            sql: "SELECT body_file FROM \(Self.table) WHERE scope = ? AND body_file IS NOT NULL", parameters: [scope]
        ) { try $0.getString(name: "body_file") }
        return Set(names.filter(FileName.isWrittenBody))
    }

    /// Deletes the hand-off `id`; `true` when it was there. Called in the transaction that books its result:
    /// `false` means another adoption (or the discovery that it was forgotten) came first.
    func remove(id: String, in tx: SqlTransaction) throws -> Bool {
        try tx.execute(sql: "DELETE FROM \(Self.table) WHERE scope = ? AND id = ?", parameters: [scope, id]) == 1
    }

    private static let select = """
        SELECT id, attachment_id, direction, request, body_file, expected_size, sha256, created_at
        FROM \(table) WHERE scope = ?
        """

    private static func handOff(_ cursor: SqlCursor) throws -> HandOff {
        let direction = try cursor.getString(name: "direction")
        guard let parsed = BackgroundTransfer.Direction(rawValue: direction) else {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "a hand-off record has the direction \(String(reflecting: direction))")
        }
        return HandOff(
            id: try cursor.getString(name: "id"), attachmentId: try cursor.getString(name: "attachment_id"),
            direction: parsed,
            request: try JSONDecoder().decode(
                PreparedRequest.self, from: Data(try cursor.getString(name: "request").utf8)),
            bodyFileName: try cursor.getStringOptional(name: "body_file"),
            expectedSize: try cursor.getInt64Optional(name: "expected_size"),
            sha256: try cursor.getStringOptional(name: "sha256"), createdAt: try cursor.getInt64(name: "created_at"))
    }
}
