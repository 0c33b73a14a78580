import Foundation

/// Prints a line on standard output at once (unbuffered, so a piped run shows each scenario as it ends).
func printLine(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// Prints a line on standard error.
func printError(_ message: String) {
    FileHandle.standardError.write(Data((message + "\n").utf8))
}
