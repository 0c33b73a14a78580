import Foundation

/// A small deterministic generator (SplitMix64): the same seed gives the same numbers, so a random test
/// that prints its seed can be replayed.
package struct SplitMix64: RandomNumberGenerator {
    package var state: UInt64
    package init(seed: UInt64) { state = seed }

    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    package mutating func next(below bound: UInt64) -> UInt64 { next() % bound }

    /// The seed of a random test run: the value of the environment variable `variable` when it holds one (a
    /// replay), else a new random seed. The test prints it, and `variable=<seed>` makes the same choices again.
    package static func seed(from variable: String) -> UInt64 {
        ProcessInfo.processInfo.environment[variable].flatMap(UInt64.init) ?? UInt64.random(in: 1...UInt64.max)
    }
}
