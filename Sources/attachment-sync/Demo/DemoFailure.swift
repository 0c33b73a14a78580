/// Why the demo did not converge: a step that timed out, or a copy whose bytes differ from the original.
///
/// ArgumentParser prints its description after `Error:` and the command exits with a non-zero status.
struct DemoFailure: Error, CustomStringConvertible {
    /// What went wrong, in a sentence a reader can act on.
    let description: String

    /// A failure with the given explanation.
    init(_ description: String) {
        self.description = description
    }
}
