// The benchmark executable: see Benchmarks/README.md and `attachment-sync-bench --help`.
import Foundation

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == LargeFileChild.command {
    exit(await LargeFileChild.main(Array(arguments.dropFirst())))
}
if arguments.first == S3BigFileChild.command {
    exit(await S3BigFileChild.main(Array(arguments.dropFirst())))
}
if arguments.first == S3EncryptedBigFileChild.command {
    exit(await S3EncryptedBigFileChild.main(Array(arguments.dropFirst())))
}
if arguments.first == BucketGCChild.command {
    exit(await BucketGCChild.main(Array(arguments.dropFirst())))
}
if arguments.first == ColdStartChild.command {
    exit(await ColdStartChild.main(Array(arguments.dropFirst())))
}
if arguments.first == WatchReconcileChild.command {
    exit(await WatchReconcileChild.main(Array(arguments.dropFirst())))
}
if arguments.first == MappedUploadsChild.command {
    exit(await MappedUploadsChild.main(Array(arguments.dropFirst())))
}

let options: Options
do {
    options = try Options(arguments: arguments)
} catch {
    printError("attachment-sync-bench: \(error)\n\n\(Options.usage)")
    exit(2)
}
if options.showHelp {
    print(Options.usage)
    exit(0)
}

#if DEBUG
    printError("attachment-sync-bench: this is a debug build; build with -c release for meaningful figures")
#endif

if let load = Machine.loadAverage(), load > 0.75 * Double(ProcessInfo.processInfo.activeProcessorCount) {
    printError(
        String(
            format: "attachment-sync-bench: warning: the load average is %.2f on %d cores; other processes will skew "
                + "the figures", load, ProcessInfo.processInfo.activeProcessorCount))
}

options.transport.makeCurrent()
if options.scenarios.contains(where: { ["P6", "P8", "P9", "P6E", "P8E", "P9E"].contains($0.name) }) {
    printLine("S3 scenarios' transport: \(options.transport.name)")
}

var failures = 0
for scenario in options.scenarios {
    do {
        let report = try await scenario.run(options.size)
        printLine(
            "\(scenario.name)  \(report.title): \(report.figures)  →  \(report.result) (\(report.target))  "
                + report.verdict.rawValue + parenthesized(report.missNote))
        if options.verbose {
            for detail in report.details { printLine("      \(detail)") }
        }
    } catch {
        failures += 1
        printLine("\(scenario.name)  FAIL: \(error)")
    }
}
exit(failures == 0 ? 0 : 1)
