import Foundation
import TestSupport
import Testing

@testable import AttachmentSyncHTTP

/// The direct reading of S3 timestamps (one per listed object) against `ISO8601DateFormatter`.
@Suite("S3 timestamps")
struct S3TimestampTests {
    @Test("random instants from 1970 to 2400, with 0 to 9 fraction digits, read as the formatter reads them")
    func agreesWithTheFormatter() {
        var random = SplitMix64(seed: 29)
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = TimeZone(identifier: "UTC")
        for _ in 0..<5_000 {
            let seconds = Int(random.next(below: 13_569_465_600))  // to 2400-01-01
            let whole = formatter.string(from: Date(timeIntervalSince1970: Double(seconds)))
            let digits = Int(random.next(below: 10))
            var text = whole
            if digits > 0 {
                let fraction = (0..<digits).map { _ in String(random.next(below: 10)) }.joined()
                text = String(whole.dropLast()) + "." + fraction + "Z"
            }
            let fast = S3RemoteStorage.parseUTCTimestamp(text)
            let expected = Double(seconds) + (digits > 0 ? Double("0." + text.dropFirst(20).dropLast())! : 0)
            #expect(fast.map { abs($0.timeIntervalSince1970 - expected) < 1e-6 } == true, "\(text)")
            #expect(
                S3RemoteStorage.parseTimestamp(text).map { abs($0.timeIntervalSince1970 - expected) < 1e-3 } == true)
        }
    }

    @Test("leap days, ends of months and the epoch; anything else is left to the formatter or refused")
    func edges() {
        #expect(S3RemoteStorage.parseUTCTimestamp("1970-01-01T00:00:00.000Z") == Date(timeIntervalSince1970: 0))
        #expect(S3RemoteStorage.parseUTCTimestamp("2024-02-29T23:59:59Z") == Date(timeIntervalSince1970: 1_709_251_199))
        #expect(S3RemoteStorage.parseUTCTimestamp("2000-02-29T12:00:00Z") == Date(timeIntervalSince1970: 951_825_600))
        for invalid in [
            "2023-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2026-13-01T00:00:00Z", "2026-04-31T00:00:00Z",
            "2026-11-27T24:00:00Z", "2026-11-27T10:60:00Z", "2026-11-27T10:00:60Z", "2026-11-27T10:00:00.Z",
            "2026-11-27T10:00:00.1234567890Z", "2026-11-27 10:00:00Z", "2026-11-27T10:00:00+01:00",
            "2026-1l-27T10:00:00Z", "", "0000-01-01T00:00:00Z",
        ] {
            #expect(S3RemoteStorage.parseUTCTimestamp(invalid) == nil, "\(invalid)")
        }
        // An offset is read by the formatter.
        #expect(
            S3RemoteStorage.parseTimestamp("2026-11-27T11:00:00+01:00")
                == S3RemoteStorage.parseUTCTimestamp("2026-11-27T10:00:00Z"))
    }
}
