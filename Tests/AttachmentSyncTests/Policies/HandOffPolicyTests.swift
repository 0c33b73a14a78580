import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// The hand-off decisions: each result adopted at most once, nothing handed over left behind.
@Suite("Hand-off policy")
struct HandOffPolicyTests {
    static func record(_ id: String, _ direction: BackgroundTransfer.Direction = .upload, at time: Int64 = 0)
        -> HandOffStore.HandOff
    {
        HandOffStore.HandOff(
            id: id, attachmentId: "attachment-\(id)", direction: direction,
            request: PreparedRequest(
                method: direction == .upload ? "PUT" : "GET", url: URL(string: "https://s/\(id)")!),
            bodyFileName: nil, expectedSize: 1, sha256: nil, createdAt: time)
    }

    static func result(_ id: String, _ status: Int?, body: Bool = false) -> BackgroundTransferResult {
        BackgroundTransferResult(
            id: id, statusCode: status, bodyFile: body ? URL(fileURLWithPath: "/spool/\(id)") : nil,
            error: status == nil ? "connection reset" : nil)
    }

    @Test("a result is confirmed, adopted or failed by its status; one without a record is only acknowledged")
    func resultsByStatus() {
        let records = [
            Self.record("u200"), Self.record("u412"), Self.record("u403"), Self.record("unone"),
            Self.record("d200", .download), Self.record("d404", .download), Self.record("d200nobody", .download),
        ]
        let results = [
            Self.result("u200", 200), Self.result("u412", 412), Self.result("u403", 403), Self.result("unone", nil),
            Self.result("d200", 200, body: true), Self.result("d404", 404), Self.result("d200nobody", 200),
            Self.result("adopted-before", 200),
        ]
        let steps = HandOffPolicy.steps(
            records: records, running: [], results: results, handing: [], now: 10, grace: 0)
        #expect(
            steps == [
                .confirmUpload(records[0], results[0]), .confirmUpload(records[1], results[1]),
                .failed(records[2], results[2]), .failed(records[3], results[3]),
                .adoptDownload(records[4], results[4]), .failed(records[5], results[5]),
                .failed(records[6], results[6]), .acknowledge(results[7]),
            ])
    }

    @Test("a record is recovered only when the service neither runs nor reported it and it is past the grace")
    func recoveryNeedsSilenceAndTime() {
        let records = [
            Self.record("running", at: 0), Self.record("handing", at: 0), Self.record("young", at: 900),
            Self.record("lost", at: 0), Self.record("reported", at: 0),
        ]
        let steps = HandOffPolicy.steps(
            records: records, running: ["running"], results: [Self.result("reported", 200)], handing: ["handing"],
            now: 1_000, grace: 500)
        #expect(steps == [.confirmUpload(records[4], Self.result("reported", 200)), .recover(records[3])])
    }

    /// An upload's result that may mean the object is stored: 2xx, or 412 from a create-only request.
    static func mayBeStored(_ result: BackgroundTransferResult) -> Bool {
        result.statusCode.map { (200..<300).contains($0) || $0 == 412 } == true
    }

    /// A download's result that delivered a body: 2xx with a file.
    static func isDelivered(_ result: BackgroundTransferResult) -> Bool {
        result.statusCode.map { (200..<300).contains($0) } == true && result.bodyFile != nil
    }

    @Test("random records, running sets and results: one step per result (replay: ATTACHMENT_SYNC_HANDOFF_SEED)")
    func randomSituations() {
        let seed =
            ProcessInfo.processInfo.environment["ATTACHMENT_SYNC_HANDOFF_SEED"].flatMap { UInt64($0) }
            ?? UInt64.random(in: 0...UInt64.max)
        var generator = SplitMix64(seed: seed)
        for round in 0..<500 {
            let ids = (0..<Int.random(in: 0...12, using: &generator)).map { "t\($0)" }
            let records = ids.filter { _ in Bool.random(using: &generator) }.map {
                Self.record(
                    $0, Bool.random(using: &generator) ? .upload : .download,
                    at: Int64.random(in: 0...1_000, using: &generator))
            }
            let running = Set(ids.filter { _ in Int.random(in: 0..<4, using: &generator) == 0 })
            let handing = Set(ids.filter { _ in Int.random(in: 0..<6, using: &generator) == 0 })
            let statuses: [Int?] = [nil, 200, 201, 204, 403, 404, 412, 500, 503]
            var results = ids.filter { _ in Bool.random(using: &generator) }.map {
                Self.result($0, statuses.randomElement(using: &generator)!, body: Bool.random(using: &generator))
            }
            if let repeated = results.first, Bool.random(using: &generator) { results.append(repeated) }
            let steps = HandOffPolicy.steps(
                records: records, running: running, results: results, handing: handing, now: 1_000, grace: 300)
            let context = "seed \(seed), round \(round)"
            let stepIds = steps.map { step -> String in
                switch step {
                case .confirmUpload(let record, _), .adoptDownload(let record, _), .failed(let record, _),
                    .recover(let record):
                    record.id
                case .acknowledge(let result): result.id
                }
            }
            #expect(Set(stepIds).count == stepIds.count, "one step per id: \(context)")
            #expect(Set(results.map(\.id)).isSubset(of: Set(stepIds)), "every result gets a step: \(context)")
            for step in steps {
                switch step {
                case .recover(let record):
                    #expect(!running.contains(record.id) && !handing.contains(record.id), "\(context)")
                    #expect(1_000 - record.createdAt >= 300, "\(context)")
                    #expect(!results.contains { $0.id == record.id }, "\(context)")
                case .acknowledge(let result):
                    #expect(!records.contains { $0.id == result.id }, "\(context)")
                case .confirmUpload(let record, let result):
                    #expect(record.direction == .upload && Self.mayBeStored(result), "\(context)")
                case .adoptDownload(let record, let result):
                    #expect(record.direction == .download && Self.isDelivered(result), "\(context)")
                case .failed(let record, let result):
                    let succeeded = record.direction == .upload ? Self.mayBeStored(result) : Self.isDelivered(result)
                    #expect(!succeeded, "\(context)")
                }
            }
        }
    }
}
