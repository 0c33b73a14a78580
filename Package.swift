// swift-tools-version: 6.2
import PackageDescription

/// Settings every target of ours shares: Swift 6 mode comes from `swiftLanguageModes`; warnings are errors
/// for our own code only (SwiftPM does not apply warning control to dependencies).
let strictSettings: [SwiftSetting] = [
    .treatAllWarnings(as: .error)
]

let package = Package(
    name: "AttachmentSync",
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9)],
    products: [
        .library(name: "AttachmentSync", targets: ["AttachmentSync"]),
        .library(name: "AttachmentSyncTesting", targets: ["AttachmentSyncTesting"]),
        .library(name: "AttachmentSyncHTTP", targets: ["AttachmentSyncHTTP"]),
        .library(name: "AttachmentSyncS3", targets: ["AttachmentSyncS3"]),
        .executable(name: "attachment-sync", targets: ["attachment-sync"]),
        .executable(name: "attachment-sync-bench", targets: ["attachment-sync-bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
    ],
    targets: [
        .target(
            name: "AttachmentSync",
            dependencies: [
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "AttachmentSyncTesting",
            dependencies: ["AttachmentSync"],
            swiftSettings: strictSettings
        ),
        // The S3, presigned and HTTP remotes with no SwiftNIO: what an app links (URLSession transport).
        .target(
            name: "AttachmentSyncHTTP",
            dependencies: [
                "AttachmentSync",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        // AttachmentSyncHTTP plus AsyncHTTPClient as a transport and the backend's presigned URL issuer.
        .target(
            name: "AttachmentSyncS3",
            dependencies: [
                "AttachmentSync", "AttachmentSyncHTTP",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                // `Data` viewing a response's `ByteBuffer` without a copy (AsyncHTTPClient links it already).
                .product(name: "NIOFoundationEssentialsCompat", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "attachment-sync",
            dependencies: [
                "AttachmentSync",
                "AttachmentSyncS3",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "attachment-sync-bench",
            dependencies: [
                "AttachmentSync", "AttachmentSyncTesting", "AttachmentSyncS3", "TestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Benchmarks/attachment-sync-bench",
            swiftSettings: strictSettings
        ),
        // A process the crash test kills at random moments; in no product.
        .executableTarget(
            name: "attachment-sync-crash-worker",
            dependencies: ["AttachmentSync", "TestSupport"],
            path: "Tests/CrashWorker",
            swiftSettings: strictSettings
        ),
        // The service process behind AttachmentSyncTesting's SpoolTransferService (a background URLSession's
        // stand-in on Linux); in no product.
        .executableTarget(
            name: "attachment-sync-transfer-service",
            dependencies: ["AttachmentSync", "AttachmentSyncHTTP", "AttachmentSyncS3", "AttachmentSyncTesting"],
            path: "Tests/TransferService",
            swiftSettings: strictSettings
        ),
        // The app the hand-off crash test kills at random moments while the spooled service runs on; in no
        // product.
        .executableTarget(
            name: "attachment-sync-handoff-app",
            dependencies: ["AttachmentSync", "AttachmentSyncHTTP", "AttachmentSyncTesting", "TestSupport"],
            path: "Tests/HandOffApp",
            swiftSettings: strictSettings
        ),
        // Helpers shared by the test targets, the crash worker and the benchmarks (bounded waits, child
        // processes, running the CLI); Foundation only, in no library product.
        .target(
            name: "TestSupport",
            dependencies: ["AttachmentSync"],
            path: "Tests/TestSupport",
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "AttachmentSyncTests",
            dependencies: [
                "AttachmentSync", "TestSupport",
                "AttachmentSyncTesting",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
            ],
            // The encrypted format's second decoder, run by the tests from the source tree.
            exclude: ["Encryption/decode_attachment.py"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "AttachmentSyncS3Tests",
            dependencies: [
                "AttachmentSync", "AttachmentSyncHTTP", "AttachmentSyncS3", "AttachmentSyncTesting", "TestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            resources: [.copy("Resources")],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "AttachmentSyncTestingTests",
            dependencies: ["AttachmentSync", "AttachmentSyncTesting"],
            swiftSettings: strictSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
