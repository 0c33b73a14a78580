import AttachmentSync
import Foundation

/// Inserts `count` records in `state` with SQL in one transaction, as the queue leaves them (the id
/// `<prefix><row, 6 digits>`, the file `<id>.bin` in the attachments folder with its size and SHA-256,
/// `has_synced` for a synced one), oldest first by id. Each file is a hard link to one file holding
/// `content` (at most 50,000 links per original, ext4 allows 65,000): creating 100,000 files one by one,
/// each flushed, takes minutes on a virtual disk, and only their names and bytes matter here.
func populateRecords(
    _ device: Device, count: Int, state: AttachmentState, prefix: String, content: Data, sha256: String
) async throws {
    let directory = device.attachmentsDirectory
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let linksPerFile = 50_000
    for row in 0..<count {
        let original = directory.deletingLastPathComponent().appendingPathComponent(
            "original-\(prefix)-\(row / linksPerFile)")
        if row % linksPerFile == 0 { try content.write(to: original) }
        try FileManager.default.linkItem(
            atPath: original.path,
            toPath: directory.appendingPathComponent(prefix + String(format: "%06d.bin", row)).path)
    }
    try await device.db.writeTransaction { tx in
        try tx.execute(
            sql: """
                WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < ?1)
                INSERT INTO attachments (id, filename, state, timestamp, has_synced, local_uri, size, content_hash)
                SELECT ?2 || printf('%06d', i), ?2 || printf('%06d.bin', i), ?3, 1700000000000 + i, ?4,
                       ?2 || printf('%06d.bin', i), ?5, ?6 FROM seq
                """,
            parameters: [count, prefix, state.rawValue, state == .synced, content.count, sha256])
    }
}
