/// The command line: which scenarios to run, and how.
struct Options: Sendable {
    /// The scenarios to run, in the order of ``Scenario/all``.
    var scenarios: [Scenario] = Scenario.all
    /// Full sizes or quick ones.
    var size: RunSize = .full
    /// Whether to print the detail lines under each scenario.
    var verbose = false
    /// Whether `--help` was asked for.
    var showHelp = false
    /// The transport the S3 scenarios' adapters send with (`--transport`).
    var transport = BenchTransport.current

    /// Parses the arguments after the executable's name.
    ///
    /// - Throws: ``BenchmarkFailure`` naming an unknown option or scenario.
    init(arguments: [String]) throws {
        var names: [String] = []
        var arguments = arguments[...]
        while let argument = arguments.popFirst() {
            switch argument {
            case "--transport":
                guard let name = arguments.popFirst(), let chosen = BenchTransport(rawValue: name.lowercased()) else {
                    throw BenchmarkFailure(
                        "--transport takes one of: \(BenchTransport.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                transport = chosen
            case "--quick": size = .quick
            case "--verbose", "-v": verbose = true
            case "--help", "-h": showHelp = true
            default:
                guard !argument.hasPrefix("-") else { throw BenchmarkFailure("unknown option \(argument)") }
                guard Scenario.all.contains(where: { $0.name.lowercased() == argument.lowercased() }) else {
                    throw BenchmarkFailure("unknown scenario \(argument)")
                }
                names.append(argument.lowercased())
            }
        }
        if !names.isEmpty {
            scenarios = Scenario.all.filter { names.contains($0.name.lowercased()) }
        }
    }

    /// The text `--help` prints.
    static var usage: String {
        var lines = [
            "USAGE: attachment-sync-bench [--quick] [--verbose] [SCENARIO…]",
            "",
            "Runs AttachmentSync's benchmark scenarios (issues 4 and 6), each with its baseline in the same run, and",
            "prints one line per scenario: the figures, the ratio, the target, and PASS or MISS.",
            "Exits with 1 when a scenario's correctness check fails (a missed target is only a MISS).",
            "Build with -c release; see Benchmarks/README.md.",
            "",
            "SCENARIOS (all by default):",
        ]
        lines += Scenario.all.map { "  \($0.name)  \($0.summary)" }
        lines += [
            "",
            "OPTIONS:",
            "  --quick      smaller sizes, for a smoke run of about a minute",
            "  --verbose    print set-up times and breakdowns under each scenario",
            "  --transport asynchttpclient|urlsession",
            "               what the S3 scenarios' adapters send with (default asynchttpclient)",
            "  -h, --help   show this help",
        ]
        return lines.joined(separator: "\n")
    }
}
