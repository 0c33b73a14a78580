/// What startup does with a record that claims a local file, given whether the file is there: the
/// decision table of startup verification. A plain value with no I/O.
enum StartupDecisionTable {
    /// The repair for one record.
    enum Verdict: Equatable, Sendable {
        /// The file is there: keep it (only its stored path may need to be made relative).
        case keep
        /// An upload's file is missing but its staging twin is there (`saveFile` stopped after its commit):
        /// move the twin into place, then keep it.
        case completeSave
        /// A pending delete: remove the file and let the record go of it, whether or not the file is there.
        case removeFile
        /// A synced attachment whose file is missing: download it again.
        case downloadAgain
        /// A file waiting for upload is gone, the only copy: give the upload up and archive the record,
        /// marked so the app can see it.
        case giveUpUpload
        /// An archived attachment or a queued download whose file is missing: the record lets go of it.
        case release
    }

    /// The verdict for a record in `state` whose file exists or not, and whose save's staging twin (only
    /// looked for when an upload's file is missing) exists or not.
    static func verdict(state: AttachmentState, fileExists: Bool, stagingExists: Bool) -> Verdict {
        switch (state, fileExists) {
        case (.queuedDelete, _): return .removeFile
        case (_, true): return .keep
        case (.queuedUpload, false): return stagingExists ? .completeSave : .giveUpUpload
        case (.synced, false): return .downloadAgain
        case (.archived, false), (.queuedDownload, false): return .release
        }
    }
}
