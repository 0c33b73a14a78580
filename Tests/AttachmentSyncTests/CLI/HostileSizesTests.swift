import AttachmentSync
import Foundation
import TestSupport
import Testing

/// Sizes in an attachments table come from synced rows (any device writes them) and from whatever else
/// writes the table: `status`, `verify` and `gc` must read any of them without crashing, sum them without
/// overflowing, and say which they could not count.
@Suite("hostile sizes in the attachments table", .cleansUp)
struct HostileSizesTests {
    /// One row of a table made up for a test: a size of any storage class, and the columns the report reads.
    struct Row: Sendable {
        var id: String
        var state: AttachmentState
        var size: SqlValue
        var localURI: String? = nil
        var hasSynced: Bool = true
        var pinned: Bool = false
        var onDemand: Bool = false
    }

    /// A database file at `path` with an attachments table holding `rows` as given (sizes of any type).
    static func makeDatabase(at path: String, rows: [Row]) async throws {
        let db = try LocalDatabase(path: path, schema: Schema(tables: [createAttachmentTable()]))
        try await db.writeTransaction { tx in
            for row in rows {
                try tx.execute(
                    sql: """
                        INSERT INTO attachments (id, filename, state, size, local_uri, has_synced, pinned, on_demand,
                            timestamp)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)
                        """,
                    arguments: [
                        row.id, row.id + ".bin", row.state.rawValue, row.size, row.localURI, row.hasSynced,
                        row.pinned, row.onDemand,
                    ])
            }
        }
        try await db.close()
    }

    @Test("status survives sizes that add up past Int64.max (it crashed with exit 132)")
    func sizesPastInt64Max() async throws {
        let folder = try TemporaryDirectory()
        let path = folder.path("app.sqlite")
        try await Self.makeDatabase(
            at: path,
            rows: [
                Row(id: "a", state: .synced, size: .integer(.max), localURI: "a.bin"),
                Row(id: "b", state: .synced, size: .integer(.max), localURI: "b.bin"),
                Row(id: "c", state: .archived, size: .integer(.max), localURI: "c.bin"),
                Row(id: "d", state: .queuedUpload, size: .integer(.max), localURI: "d.bin", hasSynced: false),
            ])
        let tool = try CommandLineTool.locate()

        let text = try await tool.run(["status", path])
        #expect(text.status == 0, "stderr: \(text.standardError)")
        #expect(text.standardOutput.contains("4 attachments in table attachments"))

        let json = try await tool.run(["status", path, "--json", "--budget", "1000"])
        #expect(json.status == 0, "stderr: \(json.standardError)")
        let document = try #require(
            try JSONSerialization.jsonObject(with: Data(json.standardOutput.utf8)) as? [String: Any])
        let states = try #require(document["states"] as? [String: [String: Any]])
        #expect(states["synced"]?["bytes"] as? Int64 == .max, "saturated, not wrapped")
        #expect(states["synced"]?["count"] as? Int == 2)
        #expect(document["localContentBytes"] as? Int64 == .max)
        let cache = try #require(document["cache"] as? [String: Any])
        #expect(cache["usedBytes"] as? Int64 == .max)
        #expect(cache["evictableBytes"] as? Int64 == .max)
    }

    @Test("AttachmentQueue.status saturates its sums of sizes")
    func queueStatusSaturates() async throws {
        let device = try QueueHarness()
        for id in ["a", "b", "c"] {
            _ = try await device.db.execute(
                sql: """
                    INSERT INTO attachments (id, filename, state, size, local_uri, has_synced, timestamp)
                    VALUES (?, ?, ?, ?, ?, 1, 0)
                    """,
                parameters: [id, id + ".bin", id == "c" ? 4 : 3, Int64.max, id + ".bin"])
        }
        let status = try await firstElement("a status", in: device.queue.status) { _ in true }
        #expect(status.states[.synced]?.bytes == .max)
        #expect(status.localContentBytes == .max)
        #expect(status.cache.usedBytes == .max)
        await device.queue.close()
    }

    // MARK: - Random tables

    /// The seed of the random tables: `ATTACHMENT_SYNC_FUZZ_SEED`, or a new one each run; every failure
    /// prints it, and `ATTACHMENT_SYNC_FUZZ_SEED=<seed>` replays the run.
    static let seed = SplitMix64.seed(from: "ATTACHMENT_SYNC_FUZZ_SEED")
    /// How many tables the library is read on (`ATTACHMENT_SYNC_FUZZ_TABLES`), and how many of them the
    /// CLI reads too (a process per command: slower).
    static let tables = ProcessInfo.processInfo.environment["ATTACHMENT_SYNC_FUZZ_TABLES"].flatMap(Int.init) ?? 150
    static let cliTables = min(tables, 8)

    /// A size of any kind a hostile or broken writer may leave: none, small, huge, near and at `Int64.max`,
    /// negative, real, text (some that SQLite turns into numbers), blob.
    static func randomSize(_ random: inout SplitMix64) -> SqlValue {
        switch random.next(below: 16) {
        case 0: return .null
        case 1: return .integer(0)
        case 2, 3, 4: return .integer(Int64(random.next(below: 300_000)))
        case 5: return .integer(.max)
        case 6: return .integer(.max - Int64(random.next(below: 1_000)))
        case 7: return .integer(Int64(random.next(below: UInt64(Int64.max))))
        case 8: return .integer((1 << 53) + Int64(random.next(below: 1_000)))
        case 9: return .integer(-1 - Int64(random.next(below: 1_000)))
        case 10: return .integer(.min)
        case 11:
            let reals = [1.5, -0.5, 1e300, -1e300, 9.3e18, Double.infinity, 2.0]
            return .real(reals[Int(random.next(below: UInt64(reals.count)))])
        case 12:
            let texts = [
                "abc", "", "12abc", "9223372036854775808", "-1", "42", "1e3", String(repeating: "9", count: 400),
            ]
            return .text(texts[Int(random.next(below: UInt64(texts.count)))])
        case 13: return .blob(Data([1, 2, 3]))
        default: return .integer(Int64(random.next(below: 1 << 40)))
        }
    }

    static func randomRows(_ random: inout SplitMix64) -> [Row] {
        (0..<Int(random.next(below: 15))).map { index in
            let id = "r\(index)-\(random.next(below: 1_000))"
            return Row(
                id: id, state: AttachmentState(rawValue: Int(random.next(below: 5)))!, size: randomSize(&random),
                localURI: random.next(below: 2) == 0 ? id + ".bin" : nil, hasSynced: random.next(below: 2) == 0,
                pinned: random.next(below: 4) == 0, onDemand: random.next(below: 4) == 0)
        }
    }

    /// What the table holds after SQLite applied the column's affinity (`"42"` is stored as 42).
    struct Stored {
        var state: AttachmentState
        var size: SqlValue
        var hasLocalFile: Bool

        /// The size when it is a byte count.
        var validSize: Int64? {
            if case .integer(let value) = size, value >= 0 { return value }
            return nil
        }
    }

    static func stored(_ path: String) async throws -> [String: Stored] {
        let db = try LocalDatabase.readOnly(path: path)
        let rows = try await db.getAll(sql: "SELECT id, state, size, local_uri FROM attachments") { cursor in
            (
                try cursor.getString(name: "id"),
                Stored(
                    state: AttachmentState(rawValue: try cursor.getInt(name: "state"))!,
                    size: try cursor.getValue(name: "size"),
                    hasLocalFile: try cursor.getStringOptional(name: "local_uri") != nil)
            )
        }
        try await db.close()
        return Dictionary(uniqueKeysWithValues: rows)
    }

    /// Whether `reported` is the sum of `sizes` (all at least 0) as status computes it: exact below 2^53,
    /// within a relative 2^-40 above, and saturated at `Int64.max` past it.
    static func agrees(_ reported: Int64, with sizes: [Int64]) -> Bool {
        var sum: Int64 = 0
        for size in sizes {
            let (next, overflow) = sum.addingReportingOverflow(size)
            if overflow { return reported >= Int64.max - (Int64.max >> 40) }
            sum = next
        }
        if sum < 1 << 53 { return reported == sum }
        return abs(Double(reported) - Double(sum)) <= Double(sum) / Double(1 << 40)
    }

    /// Checks a report's totals against the table, field by field; `context` names the seed and table.
    static func checkTotals(
        states: [AttachmentState: QueueStatus.Totals], localContentBytes: Int64, usedBytes: Int64,
        invalidIds: [String], against table: [String: Stored], context: String
    ) {
        for state in AttachmentState.allCases {
            let rows = table.values.filter { $0.state == state }
            let totals = states[state] ?? QueueStatus.Totals(count: 0, bytes: 0)
            #expect(totals.count == rows.count, "\(context): count of \(state)")
            #expect(
                agrees(totals.bytes, with: rows.compactMap(\.validSize)),
                "\(context): bytes of \(state) \(totals.bytes), sizes \(rows.map(\.size))")
            #expect(totals.unknownSizeCount == rows.count { $0.size == .null }, "\(context): unknown sizes of \(state)")
            #expect(
                totals.invalidSizeCount == rows.count { $0.size != .null && $0.validSize == nil },
                "\(context): invalid sizes of \(state)")
        }
        let local = table.values.filter(\.hasLocalFile).compactMap(\.validSize)
        #expect(agrees(localContentBytes, with: local), "\(context): local bytes \(localContentBytes) of \(local)")
        #expect(agrees(usedBytes, with: local), "\(context): cache bytes \(usedBytes) of \(local)")
        let expectedInvalid = table.filter { $0.value.size != .null && $0.value.validSize == nil }.keys.sorted()
        #expect(invalidIds == expectedInvalid, "\(context): invalid sizes listed")
    }

    @Test("property: the library reads random tables of hostile sizes exactly, verify and gc never crash on them")
    func randomTablesInProcess() async throws {
        var random = SplitMix64(seed: Self.seed)
        for index in 0..<Self.tables {
            let context = "seed \(Self.seed) (ATTACHMENT_SYNC_FUZZ_SEED=\(Self.seed)), table \(index)"
            let folder = try TemporaryDirectory()
            let path = folder.path("app.sqlite")
            let rows = Self.randomRows(&random)
            try await Self.makeDatabase(at: path, rows: rows)
            let table = try await Self.stored(path)
            let db = try LocalDatabase.readOnly(path: path)
            do {
                let report = try await AttachmentTableReport.read(from: db, maxCacheBytes: 1_000)
                let status = report.status
                #expect(report.recordCount == rows.count, "\(context)")
                Self.checkTotals(
                    states: status.states, localContentBytes: status.localContentBytes,
                    usedBytes: status.cache.usedBytes, invalidIds: report.invalidSizes.map(\.id), against: table,
                    context: context)
                let sizes = report.largest.compactMap(\.size)
                #expect(sizes.allSatisfy { $0 >= 0 } && sizes == sizes.sorted(by: >), "\(context): largest \(sizes)")

                // verify reads every record: a size it cannot use is a typed error naming the attachment.
                let attachments = folder.path("attachments")
                try FileManager.default.createDirectory(atPath: attachments, withIntermediateDirectories: true)
                do {
                    _ = try await LocalFileVerification.verify(db: db, attachmentsDirectory: attachments)
                } catch let error as LocalDatabaseError {
                    #expect(error.message.hasPrefix("attachment "), "\(context): \(error)")
                    #expect(error.message.contains("size"), "\(context): \(error)")
                }
                // gc needs the names only: any size is fine.
                // (An existing, empty remote folder: a missing one is an error of its own.)
                try FileManager.default.createDirectory(
                    atPath: folder.path("remote"), withIntermediateDirectories: true)
                let remote = FileSystemRemoteStorage(directory: folder.path("remote"))
                let plan = try await RemoteGarbageCollection.plan(remote: remote, databases: [db], grace: .zero)
                #expect(plan.listedFiles == 0, "\(context)")
                try await db.close()
            } catch {
                try? await db.close()
                Issue.record("\(context): \(error)")
            }
        }
    }

    @Test("property: status, status --json, verify and gc run as processes on random tables never crash")
    func randomTablesThroughTheCLI() async throws {
        var random = SplitMix64(seed: Self.seed ^ 0x5EED)
        let tool = try CommandLineTool.locate()
        for index in 0..<Self.cliTables {
            let context = "seed \(Self.seed) (ATTACHMENT_SYNC_FUZZ_SEED=\(Self.seed)), CLI table \(index)"
            let folder = try TemporaryDirectory()
            let path = folder.path("app.sqlite")
            let rows = Self.randomRows(&random)
            try await Self.makeDatabase(at: path, rows: rows)
            let table = try await Self.stored(path)
            let attachments = folder.path("attachments")
            let remotePath = folder.path("remote")
            let remote = FileSystemRemoteStorage(directory: remotePath)
            try FileManager.default.createDirectory(atPath: attachments, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: remotePath, withIntermediateDirectories: true)
            for row in rows where random.next(below: 2) == 0 {
                let data = Data(repeating: 7, count: Int(random.next(below: 100)))
                if let local = row.localURI {
                    try data.write(to: URL(fileURLWithPath: attachments).appendingPathComponent(local))
                }
                try await remote.uploadFile(
                    data: data, attachment: Attachment(id: row.id, filename: row.id + ".bin", state: .synced))
            }

            let text = try await tool.run(["status", path, "--budget", "1000"])
            #expect(text.status == 0, "\(context): \(text.standardError)")
            #expect(text.standardOutput.contains("\(rows.count) attachment"), "\(context)")

            let json = try await tool.run(["status", path, "--json"])
            #expect(json.status == 0, "\(context): \(json.standardError)")
            if json.status == 0 {
                let document = try #require(
                    try JSONSerialization.jsonObject(with: Data(json.standardOutput.utf8)) as? [String: Any],
                    "\(context)")
                let states = try #require(document["states"] as? [String: [String: Any]], "\(context)")
                var totals: [AttachmentState: QueueStatus.Totals] = [:]
                for state in AttachmentState.allCases {
                    let entry = states[state.description] ?? [:]
                    totals[state] = QueueStatus.Totals(
                        count: entry["count"] as? Int ?? -1, bytes: (entry["bytes"] as? NSNumber)?.int64Value ?? -1,
                        unknownSizeCount: entry["unknownSizeCount"] as? Int ?? -1,
                        invalidSizeCount: entry["invalidSizeCount"] as? Int ?? -1)
                }
                let cache = document["cache"] as? [String: Any] ?? [:]
                let invalid = (document["invalidSizes"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
                Self.checkTotals(
                    states: totals, localContentBytes: (document["localContentBytes"] as? NSNumber)?.int64Value ?? -1,
                    usedBytes: (cache["usedBytes"] as? NSNumber)?.int64Value ?? -1, invalidIds: invalid,
                    against: table, context: context)
            }

            let verify = try await tool.run(["verify", path, "--dir", attachments])
            #expect([0, 1, 2].contains(verify.status), "\(context): \(verify.standardError)")
            if verify.status == 1 {
                #expect(verify.standardError.contains("attachment \""), "\(context): \(verify.standardError)")
                #expect(verify.standardError.contains("size"), "\(context): \(verify.standardError)")
            }

            let gc = try await tool.run(["gc", "--remote", remotePath, "--db", path])
            #expect(gc.status == 0, "\(context): \(gc.standardError)")
            let listed = try await remote.allFiles().count
            #expect(
                gc.standardOutput.contains("\(listed) referenced, 0 unreferenced"), "\(context): \(gc.standardOutput)")
        }
    }
}
