import Foundation
import TestSupport

/// What the Ceph gateway counted for a bucket (its usage log, which `scripts/s3-server` turns on and writes
/// out every second): requests by category, as the server saw them, whoever sent them.
struct CephUsage: Equatable, CustomStringConvertible {
    /// Requests by category (`put_obj`, `get_obj`, `delete_obj`, …): all of them, and those that succeeded.
    var ops: [String: (all: Int, successful: Int)] = [:]

    static func == (lhs: CephUsage, rhs: CephUsage) -> Bool {
        lhs.ops.mapValues { [$0.all, $0.successful] } == rhs.ops.mapValues { [$0.all, $0.successful] }
    }

    var description: String {
        ops.keys.sorted().map { "\($0): \(ops[$0]!.all) (\(ops[$0]!.successful) ok)" }.joined(separator: ", ")
    }

    /// The counts for `category`, zero when there are none.
    subscript(category: String) -> (all: Int, successful: Int) { ops[category] ?? (0, 0) }

    /// The gateway's counts for `bucket` now (they lag the requests by up to about a second).
    static func read(bucket: String) async throws -> CephUsage {
        let conf = ProcessInfo.processInfo.environment["ATTACHMENT_SYNC_S3_CONF"] ?? "/tmp/attachment-sync-s3/ceph.conf"
        let tool = ["/usr/bin/radosgw-admin", "/usr/local/bin/radosgw-admin"].first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
        guard let tool else {
            throw CephUsageError(message: "radosgw-admin is not installed (scripts/s3-server start)")
        }
        let process = try ChildProcess(
            tool, ["-c", conf, "usage", "show", "--bucket", bucket], standardOutput: .capture(),
            standardError: .capture())
        let ended = try await process.wait(seconds: 60)
        guard ended == .exited(0) else {
            throw CephUsageError(message: "radosgw-admin usage show: \(ended): \(process.capturedError)")
        }
        struct Report: Decodable {
            struct Entry: Decodable { var buckets: [Bucket] }
            struct Bucket: Decodable {
                var bucket: String
                var categories: [Category]
            }
            struct Category: Decodable {
                var category: String
                var ops: Int
                var successfulOps: Int

                enum CodingKeys: String, CodingKey {
                    case category, ops
                    case successfulOps = "successful_ops"
                }
            }
            var entries: [Entry]
        }
        let report = try JSONDecoder().decode(Report.self, from: Data(process.capturedOutput.utf8))
        var usage = CephUsage()
        for entry in report.entries {
            for counted in entry.buckets where counted.bucket == bucket {
                for category in counted.categories {
                    let sum = usage[category.category]
                    usage.ops[category.category] = (sum.all + category.ops, sum.successful + category.successfulOps)
                }
            }
        }
        return usage
    }

    /// The counts once they have settled: read until two reads 2.5 seconds apart agree (bounded).
    static func settled(bucket: String) async throws -> CephUsage {
        var last = try await read(bucket: bucket)
        for _ in 0..<20 {
            try await Task.sleep(for: .milliseconds(2_500))
            let now = try await read(bucket: bucket)
            if now == last { return now }
            last = now
        }
        throw CephUsageError(message: "the usage counts of \(bucket) kept changing: \(last)")
    }
}

struct CephUsageError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}
