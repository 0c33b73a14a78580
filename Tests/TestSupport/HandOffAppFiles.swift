import Foundation

/// What the hand-off app (`attachment-sync-handoff-app`) and the test that kills it agree on: the ids of the
/// files it uploads and downloads, and their bytes.
package enum HandOffAppFiles {
    /// The ids of the files the app saves (and the queue uploads): `u-000`, `u-001`, …
    package static func uploadIds(_ count: Int) -> [String] { (0..<count).map { "u-" + pad($0) } }
    /// The ids of the files another device stored, which the app's rows refer to (and the queue downloads).
    package static func downloadIds(_ count: Int) -> [String] { (0..<count).map { "d-" + pad($0) } }

    /// The bytes of the file `id`: 1 to about 160 KB, different for every id.
    package static func content(of id: String) -> Data {
        var state: UInt64 = 14_695_981_039_346_656_037
        for byte in id.utf8 { state = (state ^ UInt64(byte)) &* 1_099_511_628_211 }
        let count = 1 + Int(state % 160_000)
        var bytes = [UInt8](repeating: 0, count: count)
        for index in 0..<count {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            bytes[index] = UInt8(truncatingIfNeeded: state >> 56)
        }
        return Data(bytes)
    }

    private static func pad(_ number: Int) -> String {
        let digits = String(number)
        return String(repeating: "0", count: max(0, 3 - digits.count)) + digits
    }
}
