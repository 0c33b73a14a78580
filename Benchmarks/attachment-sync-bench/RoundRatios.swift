import Foundation

/// A ratio measured once per round (the project's time in a round over its baseline's in the same round),
/// so a report can say how far the rounds spread and whether a missed target is within that spread.
///
/// A median that misses the target by a few percent while one round meets it is noise on this machine; a
/// miss where every round is above the target is a real gap. The verdict stays the medians'; this only
/// says which of the two a MISS is.
struct RoundRatios: Sendable {
    /// The ratio of each round, in the order the rounds ran.
    var ratios: [Double]

    /// The ratios of paired rounds: `project[i]` over `baseline[i]`. Rounds without a partner are ignored.
    init(_ project: [Duration], over baseline: [Duration]) {
        ratios = zip(project, baseline).map { $0.seconds / $1.seconds }
    }

    /// The ratios given.
    init(ratios: [Double]) {
        self.ratios = ratios
    }

    /// The lowest and the highest round, `nil` with no rounds.
    var bounds: (low: Double, high: Double)? {
        guard let low = ratios.min(), let high = ratios.max() else { return nil }
        return (low, high)
    }

    /// `rounds 1.05–1.38×`; empty with fewer than two rounds (one round has no spread).
    var spread: String {
        guard ratios.count > 1, let (low, high) = bounds else { return "" }
        return String(format: "rounds %.2f–%.2f×", low, high)
    }

    /// For a target the ratio must not exceed: whether the rounds are all above it (a real gap), or some
    /// meet it (the miss is within the spread of the rounds). Empty when every round meets it, or with fewer
    /// than two rounds.
    func missNote(atMost target: Double) -> String {
        guard ratios.count > 1, let (low, high) = bounds, high > target else { return "" }
        if low > target {
            return "every round above the target (\(spread))"
        }
        return "\(spread): some rounds meet the target, the miss is within their spread"
    }

    /// The baseline of each round: the fastest of `sides`' times in that round (each side's times in round
    /// order; rounds some side lacks are left out).
    static func fastest(of sides: [[Duration]]) -> [Duration] {
        let rounds = sides.map(\.count).min() ?? 0
        return (0..<rounds).map { round in sides.map { $0[round] }.min() ?? .zero }
    }
}

extension ScenarioReport {
    /// The report with `ratios`' spread added to its result, and for a MISS whether the rounds overlap the
    /// target (at most `target`).
    func withRounds(_ ratios: RoundRatios, atMost target: Double) -> ScenarioReport {
        var report = self
        guard !ratios.spread.isEmpty else { return report }
        report.result += parenthesized(ratios.spread)
        if verdict == .miss {
            report.missNote = ratios.missNote(atMost: target)
        }
        return report
    }
}

/// ` (text)`, or nothing for empty text.
func parenthesized(_ text: String) -> String {
    text.isEmpty ? "" : " (\(text))"
}
