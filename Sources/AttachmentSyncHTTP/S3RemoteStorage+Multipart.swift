import AttachmentSync
import Foundation

extension S3RemoteStorage {
    /// S3's limit on the number of parts of one upload.
    static let maximumPartCount: Int64 = 10_000

    /// The part size for a file: the configured one, raised (to a whole MiB) when the file would otherwise
    /// need more than 10,000 parts.
    func partSize(forFileOfSize size: Int64) -> Int64 {
        let mebibyte: Int64 = 1024 * 1024
        let needed = (size + Self.maximumPartCount - 1) / Self.maximumPartCount
        let rounded = (needed + mebibyte - 1) / mebibyte * mebibyte
        return max(configuration.partSize, rounded)
    }

    /// Uploads a file in parts, continuing an upload recorded in the state directory when there is one.
    ///
    /// The server's list of parts is the truth on resume: parts it holds with the right size are kept, the
    /// others are uploaded. A failure the queue should retry later (the network, the server busy, refused
    /// credentials, cancellation) keeps the upload and its state for the next attempt; any other failure
    /// aborts the upload and forgets it.
    func uploadMultipart(
        fileURL: URL, size: Int64, key: String, attachment: Attachment, progress: @escaping TransferProgressHandler
    ) async throws {
        try await uploadMultipart(
            .file(fileURL), size: size, key: key, attachment: attachment, progress: progress)
    }

    /// Where a multipart upload's bytes come from: a file, or parts made one at a time (see ``UploadParts``).
    enum PartSource: Sendable {
        case file(URL)
        case made(any UploadParts)
    }

    func uploadMultipart(
        _ source: PartSource, size: Int64, key: String, attachment: Attachment,
        progress: @escaping TransferProgressHandler
    ) async throws {
        let bucket = configuration.bucket
        let files = transport.files
        let modificationTime: Double
        switch source {
        case .file(let fileURL):
            modificationTime = try files.infoFollowingLinks(atPath: fileURL.path)?.modificationTime ?? 0
        case .made(let parts): modificationTime = parts.modificationTime
        }
        let partSize = partSize(forFileOfSize: size)
        let partCount = Int((size + partSize - 1) / partSize)

        // The SHA-256 stored with the object and compared with what is under the key before and after
        // completing: the one the queue recorded at save, else the file's own.
        var sha256 = validSHA256(attachment.contentHash)
        if sha256 == nil {
            switch source {
            case .file(let fileURL):
                sha256 = try await PayloadDigests.sha256(ofFileAt: fileURL, offset: 0, length: size, files: files)
            case .made(let parts): sha256 = parts.sha256
            }
        }
        let fileSHA256 = sha256 ?? ""

        var state: MultipartUploadState
        var completed: [Int: String] = [:]
        if let saved = uploadStore.load(bucket: bucket, key: key, fileSize: size),
            saved.partSize == partSize, saved.fileModificationTime == modificationTime,
            saved.sha256 == nil || saved.sha256 == fileSHA256,
            let listed = try await listParts(key: key, uploadId: saved.uploadId, attachment: attachment)
        {
            // Another device may have stored the name while this upload waited: no part more is sent then.
            if try await settledBeforeCompleting(
                key: key, uploadId: saved.uploadId, sha256: fileSHA256, size: size, attachment: attachment,
                progress: progress)
            {
                return
            }
            state = saved
            for (number, part) in listed where number >= 1 && number <= partCount {
                if part.size == Self.length(ofPart: number, partSize: partSize, fileSize: size) {
                    completed[number] = part.etag
                }
            }
            configuration.logger.debug(
                "resuming multipart upload",
                metadata: ["key": "\(key)", "completedParts": "\(completed.count)", "parts": "\(partCount)"])
        } else {
            if let stale = uploadStore.load(bucket: bucket, key: key, fileSize: size) {
                await abortQuietly(key: key, uploadId: stale.uploadId)
                uploadStore.remove(bucket: bucket, key: key, fileSize: size)
            }
            // Create-only: an object already there is this upload done (the same SHA-256) or a conflict.
            if configuration.createOnly, try await fileInfo(attachment: attachment) != nil {
                try await settleExistingObject(sha256: fileSHA256, attachment: attachment)
                progress(TransferProgress(completedBytes: size, totalBytes: size))
                return
            }
            let uploadId = try await createMultipartUpload(
                key: key, size: size, sha256: fileSHA256, attachment: attachment)
            state = MultipartUploadState(
                bucket: bucket, key: key, fileSize: size, fileModificationTime: modificationTime, partSize: partSize,
                uploadId: uploadId, createdAt: transport.now(), parts: [], sha256: fileSHA256)
        }
        state.parts = completed.map { MultipartUploadState.Part(partNumber: $0.key, etag: $0.value) }
            .sorted { $0.partNumber < $1.partNumber }
        try uploadStore.save(state)

        let session = MultipartUploadSession(state: state, store: uploadStore)
        let alreadySent = completed.keys.reduce(Int64(0)) {
            $0 + Self.length(ofPart: $1, partSize: partSize, fileSize: size)
        }
        let sent = UploadProgress(totalBytes: size, alreadySent: alreadySent, progress: progress)
        let missing = (1...max(1, partCount)).filter { completed[$0] == nil }
        let uploadId = state.uploadId
        do {
            try await withThrowingTaskGroup(of: MultipartUploadState.Part.self) { group in
                var pending = missing.makeIterator()
                func start(_ number: Int) {
                    group.addTask {
                        try await self.uploadPart(
                            number, from: source, fileSize: size, partSize: partSize, key: key, uploadId: uploadId,
                            attachment: attachment, onChunk: sent.add)
                    }
                }
                for _ in 0..<configuration.partConcurrency {
                    guard let number = pending.next() else { break }
                    start(number)
                }
                while let part = try await group.next() {
                    try await session.record(part)
                    if let number = pending.next() {
                        start(number)
                    }
                }
            }
            let parts = await session.state.parts
            // The last look before completing: S3 servers such as Ceph complete over an existing object
            // whatever `If-None-Match` says.
            if try await settledBeforeCompleting(
                key: key, uploadId: uploadId, sha256: fileSHA256, size: size, attachment: attachment,
                progress: progress)
            {
                return
            }
            let completed = try await completeMultipartUpload(
                key: key, uploadId: uploadId, parts: parts, attachment: attachment)
            guard completed else {
                // 412: the server found an object under the key and completed nothing.
                try await settleExistingObject(sha256: fileSHA256, attachment: attachment)
                await abortQuietly(key: key, uploadId: uploadId)
                uploadStore.remove(bucket: bucket, key: key, fileSize: size)
                return
            }
            uploadStore.remove(bucket: bucket, key: key, fileSize: size)
            if configuration.createOnly {
                try await checkCompletedObject(sha256: fileSHA256, key: key, attachment: attachment)
            }
        } catch {
            if Self.keepsUploadForRetry(error) {
                configuration.logger.debug(
                    "multipart upload interrupted; kept for resuming", metadata: ["key": "\(key)", "error": "\(error)"])
            } else {
                await abortQuietly(key: key, uploadId: uploadId)
                uploadStore.remove(bucket: bucket, key: key, fileSize: size)
            }
            throw error
        }
    }

    /// With ``Configuration/createOnly``, looks under the key before a multipart upload goes on or completes:
    /// nothing there is `false` (go on); an object stored with `sha256` is this upload already done (by this
    /// device, whose answer was lost, or another with the same bytes), so the upload is aborted and forgotten,
    /// and `true` returned; another object is `AttachmentError.Code.conflict`
    /// (the caller aborts the upload).
    private func settledBeforeCompleting(
        key: String, uploadId: String, sha256: String, size: Int64, attachment: Attachment,
        progress: TransferProgressHandler
    ) async throws -> Bool {
        guard configuration.createOnly, try await fileInfo(attachment: attachment) != nil else { return false }
        do {
            try await settleExistingObject(sha256: sha256, attachment: attachment)
        } catch let error as AttachmentError where error.code == .conflict {
            await abortQuietly(key: key, uploadId: uploadId)
            uploadStore.remove(bucket: configuration.bucket, key: key, fileSize: size)
            throw error
        }
        configuration.logger.debug(
            "the content of a multipart upload is already stored; aborted the upload", metadata: ["key": "\(key)"])
        await abortQuietly(key: key, uploadId: uploadId)
        uploadStore.remove(bucket: configuration.bucket, key: key, fileSize: size)
        progress(TransferProgress(completedBytes: size, totalBytes: size))
        return true
    }

    /// After a completion: the object under the key must be the one just completed (its stored SHA-256). Other
    /// content means another upload replaced it since: a
    /// `AttachmentError.Code.conflict`, this device's bytes kept locally.
    private func checkCompletedObject(sha256: String, key: String, attachment: Attachment) async throws {
        guard let stored = try await fileInfo(attachment: attachment) else {
            throw AttachmentError(
                code: .remoteUnavailable,
                message: "S3 completed the upload of \(String(reflecting: key)), but no object is there now; "
                    + "try again", attachmentId: attachment.id, name: key)
        }
        guard stored.sha256 != sha256.lowercased() else { return }
        throw AttachmentError(
            code: .conflict,
            message: "S3 holds other content as \(String(reflecting: key)) right after this device completed its "
                + "upload (SHA-256 \(stored.sha256 ?? "not stored"), not \(sha256)): another upload replaced it",
            attachmentId: attachment.id, name: key)
    }

    /// Whether a failed multipart upload is worth continuing later rather than aborting.
    static func keepsUploadForRetry(_ error: any Error) -> Bool {
        if error is CancellationError { return true }
        guard let error = error as? AttachmentError else { return false }
        return error.code == .remoteUnavailable || error.code == .accessDenied
    }

    static func length(ofPart number: Int, partSize: Int64, fileSize: Int64) -> Int64 {
        let start = Int64(number - 1) * partSize
        return max(0, min(partSize, fileSize - start))
    }

    // MARK: - Requests

    private func createMultipartUpload(
        key: String, size: Int64, sha256: String, attachment: Attachment
    ) async throws -> String {
        var headers: [(name: String, value: String)] = []
        if let mediaType = attachment.mediaType, !mediaType.isEmpty {
            headers.append(("content-type", mediaType))
        }
        headers.append((Self.sha256MetadataHeader, sha256))
        var request = S3Request(
            method: .post, key: key, query: [("uploads", "")], headers: headers, operation: "CreateMultipartUpload")
        request.objectSize = size
        let response = try await send(request, attachmentId: attachment.id)
        let body = try await transport.collect(
            response, event: request.event, attachmentId: attachment.id, upTo: 1 << 20)
        guard let uploadId = S3XML.parse(body)?.value("UploadId"), !uploadId.isEmpty else {
            throw AttachmentError(
                code: .remoteFailure,
                message: "S3 CreateMultipartUpload of \(String(reflecting: key)) returned no upload id",
                attachmentId: attachment.id, name: key)
        }
        return uploadId
    }

    private func uploadPart(
        _ number: Int, from source: PartSource, fileSize: Int64, partSize: Int64, key: String, uploadId: String,
        attachment: Attachment, onChunk: @escaping @Sendable (Int) -> Void
    ) async throws -> MultipartUploadState.Part {
        let partOffset = Int64(number - 1) * partSize
        let length = Self.length(ofPart: number, partSize: partSize, fileSize: fileSize)
        let fileURL: URL
        let offset: Int64
        let digests: (md5: String?, sha256: String)
        switch source {
        case .file(let url):
            (fileURL, offset) = (url, partOffset)
            digests = try await PayloadDigests.of(
                fileAt: fileURL, offset: offset, length: length, md5: configuration.sendsContentMD5,
                files: transport.files)
        case .made(let parts):
            // The part is made into a file of its own (its digests taken as it is), sent from there, and
            // removed once it went (or failed).
            let part = try await parts.materialize(
                offset: partOffset, length: length, md5: configuration.sendsContentMD5)
            (fileURL, offset, digests) = (part.url, 0, (part.md5, part.sha256))
        }
        defer {
            if case .made = source { try? transport.files.removeFile(atPath: fileURL.path) }
        }
        let event = RequestEvent(operation: "UploadPart", method: "PUT", object: key, partNumber: number)
        return try await transport.watched(event, attachmentId: attachment.id) { meter in
            let request = S3Request(
                method: .put, key: key, query: [("partNumber", String(number)), ("uploadId", uploadId)],
                headers: digests.md5.map { [("content-md5", $0)] } ?? [],
                body: .file(fileURL, offset: offset, length: length) { count in
                    meter.add(Int64(count))
                    onChunk(count)
                },
                payload: .sha256(digests.sha256), operation: "UploadPart", partNumber: number)
            let response = try await self.send(request, attachmentId: attachment.id)
            _ = try await self.transport.collect(
                response, event: request.event, attachmentId: attachment.id, upTo: 1 << 20)
            guard let etag = response.headers.first(name: "etag"), !etag.isEmpty else {
                throw AttachmentError(
                    code: .remoteFailure,
                    message: "S3 UploadPart \(number) of \(String(reflecting: key)) returned no ETag",
                    attachmentId: attachment.id, name: key)
            }
            return MultipartUploadState.Part(partNumber: number, etag: etag)
        }
    }

    /// Completes the upload, create-only when ``Configuration/createOnly`` (`If-None-Match: *`, which AWS
    /// honours and Ceph ignores); `false` when the server answered 412 (an object is there, nothing completed).
    private func completeMultipartUpload(
        key: String, uploadId: String, parts: [MultipartUploadState.Part], attachment: Attachment
    ) async throws -> Bool {
        var xml = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        for part in parts {
            xml += "<Part><PartNumber>\(part.partNumber)</PartNumber><ETag>\(S3XML.escape(part.etag))</ETag></Part>"
        }
        xml += "</CompleteMultipartUpload>"
        let body = Data(xml.utf8)
        var request = S3Request(
            method: .post, key: key, query: [("uploadId", uploadId)], headers: [("content-type", "application/xml")],
            body: .data(body), payload: .hashing(body), operation: "CompleteMultipartUpload")
        if configuration.createOnly { request.headers.append(("if-none-match", "*")) }
        let response = try await send(request, attachmentId: attachment.id) {
            (200..<300).contains($0.code) || $0 == .preconditionFailed
        }
        // S3 may answer 200 and still fail: the error is then in the body.
        let reply = try await transport.collect(
            response, event: request.event, attachmentId: attachment.id, upTo: 1 << 20)
        if response.status == .preconditionFailed { return false }
        if let root = S3XML.parse(reply), root.name == "Error" {
            throw transport.error(
                for: response, body: reply, event: request.event, attachmentId: attachment.id,
                status: .internalServerError)
        }
        return true
    }

    /// The parts the server holds for an upload, by number, or `nil` when the upload no longer exists.
    private func listParts(
        key: String, uploadId: String, attachment: Attachment
    ) async throws -> [Int: (etag: String, size: Int64)]? {
        var parts: [Int: (etag: String, size: Int64)] = [:]
        var marker: String?
        for _ in 0..<Int(Self.maximumPartCount / 1000 + 2) {
            var query: [(name: String, value: String)] = [("uploadId", uploadId), ("max-parts", "1000")]
            if let marker { query.append(("part-number-marker", marker)) }
            let request = S3Request(method: .get, key: key, query: query, operation: "ListParts")
            let response = try await send(request, attachmentId: attachment.id, accepts: { _ in true })
            let body = try await transport.collect(
                response, event: request.event, attachmentId: attachment.id, upTo: 8 << 20)
            if response.status == .notFound {
                return nil  // NoSuchUpload: aborted, completed or expired
            }
            guard (200..<300).contains(response.status.code), let root = S3XML.parse(body) else {
                throw transport.error(for: response, body: body, event: request.event, attachmentId: attachment.id)
            }
            for part in root.children("Part") {
                guard let number = part.value("PartNumber").flatMap({ Int($0) }), let etag = part.value("ETag"),
                    let size = part.value("Size").flatMap({ Int64($0) })
                else { continue }
                parts[number] = (etag, size)
            }
            guard root.value("IsTruncated") == "true", let next = root.value("NextPartNumberMarker") else {
                return parts
            }
            marker = next
        }
        return parts
    }

    /// Aborts an upload, ignoring failures (it is clean-up; stale uploads can be aborted later).
    func abortQuietly(key: String, uploadId: String) async {
        let request = S3Request(
            method: .delete, key: key, query: [("uploadId", uploadId)], operation: "AbortMultipartUpload")
        if let response = try? await send(request, attachmentId: nil, accepts: { _ in true }) {
            _ = try? await response.body.collect(upTo: HTTPTransport.maxErrorBody)
        }
    }

    // MARK: - Stale uploads

    /// Aborts the multipart uploads under ``Configuration/keyPrefix`` started more than `age` ago, and forgets
    /// their saved state, so abandoned parts stop taking space. Call it now and then (at app start, say) with
    /// an age well above your longest upload.
    ///
    /// - Parameter age: How old an upload must be to be aborted.
    /// - Returns: How many uploads were aborted.
    @discardableResult
    public func abortStaleMultipartUploads(olderThan age: Duration) async throws -> Int {
        let (seconds, attoseconds) = age.components
        let cutoff = transport.now().addingTimeInterval(-(TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18))
        var aborted = 0
        var keyMarker: String?
        var uploadIdMarker: String?
        var staleIds: Set<String> = []
        for _ in 0..<10_000 {
            var query: [(name: String, value: String)] = [("uploads", ""), ("prefix", configuration.keyPrefix)]
            if let keyMarker { query.append(("key-marker", keyMarker)) }
            if let uploadIdMarker { query.append(("upload-id-marker", uploadIdMarker)) }
            let request = S3Request(method: .get, key: nil, query: query, operation: "ListMultipartUploads")
            let response = try await send(request, attachmentId: nil)
            let body = try await transport.collect(response, event: request.event, attachmentId: nil, upTo: 16 << 20)
            guard let root = S3XML.parse(body) else { break }
            for upload in root.children("Upload") {
                guard let key = upload.value("Key"), let uploadId = upload.value("UploadId"),
                    let initiated = upload.value("Initiated").flatMap(Self.parseTimestamp), initiated < cutoff
                else { continue }
                let abort = S3Request(
                    method: .delete, key: key, query: [("uploadId", uploadId)], operation: "AbortMultipartUpload")
                let reply = try await send(abort, attachmentId: nil, accepts: { $0.code < 300 || $0 == .notFound })
                _ = try await transport.collect(
                    reply, event: abort.event, attachmentId: nil, upTo: HTTPTransport.maxErrorBody)
                staleIds.insert(uploadId)
                aborted += 1
            }
            guard root.value("IsTruncated") == "true" else { break }
            keyMarker = root.value("NextKeyMarker")
            uploadIdMarker = root.value("NextUploadIdMarker")
            if keyMarker == nil && uploadIdMarker == nil { break }
        }
        for state in uploadStore.all() where staleIds.contains(state.uploadId) {
            uploadStore.remove(bucket: state.bucket, key: state.key, fileSize: state.fileSize)
        }
        return aborted
    }

    /// An S3 timestamp: ISO 8601, with or without fractional seconds. The form S3 servers send
    /// (`2026-11-27T15:04:05.123Z`) is read directly ("Z" for UTC, up to 9 fraction digits); anything else
    /// by `ISO8601DateFormatter`. A listing has one per object, and making a formatter costs far more than
    /// the request per object (P18).
    static func parseTimestamp(_ text: String) -> Date? {
        if let date = parseUTCTimestamp(text) { return date }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }

    /// `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, or `nil` when `text` is not exactly that (a valid date and time).
    static func parseUTCTimestamp(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20, bytes.count <= 30, bytes.last == UInt8(ascii: "Z"), bytes[4] == UInt8(ascii: "-"),
            bytes[7] == UInt8(ascii: "-"), bytes[10] == UInt8(ascii: "T"), bytes[13] == UInt8(ascii: ":"),
            bytes[16] == UInt8(ascii: ":")
        else { return nil }
        /// The number in `bytes[range]`, all digits, or `nil`.
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for index in range {
                let digit = Int(bytes[index]) - 48
                guard digit >= 0, digit <= 9 else { return nil }
                value = value * 10 + digit
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
            let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
            year >= 1, (1...12).contains(month), hour < 24, minute < 60, second < 60
        else { return nil }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let monthDays = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard day >= 1, day <= monthDays[month - 1] else { return nil }
        var fraction = 0.0
        if bytes.count > 20 {
            // ".d…dZ": 1 to 9 digits.
            guard bytes[19] == UInt8(ascii: "."), bytes.count >= 22, bytes.count <= 30,
                let digits = number(20..<(bytes.count - 1))
            else { return nil }
            var scale = 1.0
            for _ in 20..<(bytes.count - 1) { scale *= 10 }
            fraction = Double(digits) / scale
        }
        // Days from 1970-01-01 to the date (proleptic Gregorian calendar, year 0 a leap year).
        let shifted = month <= 2 ? year - 1 : year
        let era = shifted / 400
        let yearOfEra = shifted - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second
        return Date(timeIntervalSince1970: Double(seconds) + fraction)
    }
}

extension S3RemoteStorage: PartwiseUploading {
    /// Whether a file of `size` bytes goes as a multipart upload (larger than
    /// ``Configuration/multipartThreshold``).
    package func uploadsInParts(size: Int64) -> Bool { size > configuration.multipartThreshold }

    /// Uploads the file `parts` makes as a multipart upload, each part made just before it goes.
    package func uploadParts(
        _ parts: any UploadParts, attachment: Attachment, progress: @escaping TransferProgressHandler
    ) async throws {
        let key = try objectKey(for: attachment)
        try await uploadMultipart(.made(parts), size: parts.size, key: key, attachment: attachment, progress: progress)
    }
}
