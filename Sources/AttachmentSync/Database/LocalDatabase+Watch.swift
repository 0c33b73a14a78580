import Dispatch
import GRDB

extension LocalDatabase {
    /// Watches a query: the returned stream yields the query's current result first, then a fresh result
    /// after every committed transaction that changes a table (or column) the query reads.
    ///
    /// Transactions that touch only other tables never wake the watch, and a result equal to the previous
    /// one is not yielded again. The stream keeps only the newest result for a consumer that is behind, so
    /// a slow consumer always reads the current state and memory stays bounded. Cancelling the task that
    /// iterates the stream (or dropping the stream) stops the observation and frees it; `close()` ends
    /// the stream normally.
    ///
    /// ```swift
    /// let stream = try db.watch(
    ///     options: WatchOptions(
    ///         sql: "SELECT photo_id FROM checklists WHERE photo_id IS NOT NULL",
    ///         parameters: [],
    ///         mapper: { cursor in try cursor.getString(name: "photo_id") }
    ///     )
    /// )
    /// for try await photoIds in stream {
    ///     print("photos:", photoIds)
    /// }
    /// ```
    ///
    /// - Throws: ``LocalDatabaseError`` with code ``LocalDatabaseError/Code-swift.struct/sqlError`` right
    ///   away when the SQL or its parameter count is wrong, ``LocalDatabaseError/Code-swift.struct/closed``
    ///   after `close()`. An error thrown later (by the mapper, say) ends the stream with that error.
    public func watch<RowType: Sendable>(
        options: WatchOptions<RowType>
    ) throws -> AsyncThrowingStream<[RowType], any Error> {
        try watch(options: options, caching: false)
    }

    /// ``watch(options:)``; with `caching`, the statement stays compiled in each reading connection's cache
    /// between runs. For the queue's own watches, whose SQL is one fixed text: an app's watches may be made
    /// with ever new SQL, which would grow the caches for good.
    func watch<RowType: Sendable>(
        options: WatchOptions<RowType>, caching: Bool
    ) throws -> AsyncThrowingStream<[RowType], any Error> {
        try ensureOpen()
        let sql = options.sql
        let arguments = StatementArguments(options.parameters)
        let mapper = options.mapper
        // Compile the statement now, so a typo fails at the call rather than in the stream (see
        // `sqlChecker` for why not on the pool's own connections).
        try LocalDatabaseError.converting(sql: sql) {
            let check = { (db: Database) throws in
                let statement = try db.makeStatement(sql: sql)
                try statement.validateArguments(arguments)
            }
            if let sqlChecker {
                try sqlChecker.read(check)
            } else {
                try writer.unsafeReentrantWrite(check)
            }
        }

        let observation =
            ValueObservation
            .tracking { db in
                try SqlTransaction(db, caching: caching).fetchResultSet(sql: sql, arguments: arguments)
            }
            // A DatabasePool can deliver its first value twice; equal results carry no news either.
            .removeDuplicates()
            .map { resultSet in try resultSet.map(mapper) }
        return try start(observation, describedBy: sql)
    }

    /// Watches what `fetch` reads: the returned stream yields its value first, then a fresh one after every
    /// committed transaction that changes a table (or column) it read, when it differs from the last. For the
    /// library's own reads that are more than one query (the status's scan), with the cached statements of
    /// each reading connection. `description` names the read in errors.
    func watch<Value: Sendable & Equatable>(
        describedBy description: String, _ fetch: @escaping @Sendable (SqlTransaction) throws -> Value
    ) throws -> AsyncThrowingStream<Value, any Error> {
        try ensureOpen()
        return try start(
            ValueObservation.tracking { db in try fetch(SqlTransaction(db, caching: true)) }.removeDuplicates(),
            describedBy: description)
    }

    /// Starts `observation` and registers it, so that `close()` ends its stream.
    private func start<Reducer: ValueReducer>(
        _ observation: ValueObservation<Reducer>, describedBy sql: String
    ) throws -> AsyncThrowingStream<Reducer.Value, any Error> where Reducer.Value: Sendable {
        let (stream, continuation) = AsyncThrowingStream.makeStream(
            of: Reducer.Value.self,
            throwing: (any Error).self,
            bufferingPolicy: .bufferingNewest(1)
        )
        let cancellable = observation.start(
            in: writer,
            scheduling: .async(onQueue: watchQueue),
            onError: { error in continuation.finish(throwing: LocalDatabaseError.wrapping(error, sql: sql)) },
            onChange: { value in continuation.yield(value) }
        )
        let id = state.withLock { state -> Int? in
            guard !state.isClosed else { return nil }
            state.nextWatchID += 1
            state.watches[state.nextWatchID] = RegisteredWatch(cancellable: cancellable) { continuation.finish() }
            return state.nextWatchID
        }
        guard let id else {
            cancellable.cancel()
            throw LocalDatabaseError(code: .closed, message: "the database is closed", path: path)
        }
        continuation.onTermination = { [weak self] _ in
            cancellable.cancel()
            _ = self?.state.withLock { $0.watches.removeValue(forKey: id) }
        }
        followOtherProcesses()
        return stream
    }

    /// Starts looking for other processes' commits (see ``Configuration/otherProcessesCheckInterval``)
    /// unless it runs: every interval while a watch is active, it reads `PRAGMA data_version` on the
    /// writer's connection (which this process's own commits, all made on that connection, never move) and
    /// when it moved, tells every observation that the whole database may have changed.
    func followOtherProcesses() {
        // Only a pool is a file that another process can open.
        guard let interval = otherProcessesCheckInterval, writer is DatabasePool else { return }
        let start = state.withLock { state -> Bool in
            guard !state.isClosed, !state.followsOtherProcesses, !state.watches.isEmpty else { return false }
            state.followsOtherProcesses = true
            return true
        }
        guard start else { return }
        let writer = writer
        let clock = clock
        Task { [weak self] in
            var seen: Int?
            while true {
                let goesOn =
                    self?.state.withLock { state -> Bool in
                        guard !state.isClosed, !state.watches.isEmpty else {
                            state.followsOtherProcesses = false
                            return false
                        }
                        return true
                    } ?? false
                guard goesOn else { return }
                let previous = seen
                do {
                    seen = try await writer.writeWithoutTransaction { db -> Int in
                        let version = try Int.fetchOne(db, sql: "PRAGMA data_version") ?? 0
                        if let previous, version != previous {
                            try db.inTransaction {
                                try db.notifyChanges(in: .fullDatabase)
                                return .commit
                            }
                        }
                        return version
                    }
                } catch {
                    // Busy or closing: the next round tries again (or ends, once closed).
                }
                do {
                    try await clock.sleep(for: interval)
                } catch {
                    self?.state.withLock { $0.followsOtherProcesses = false }
                    return
                }
            }
        }
    }

    /// Watches a query; the same as ``watch(options:)`` with the options spelled out.
    public func watch<RowType: Sendable>(
        sql: String,
        parameters: SqlParameters = [],
        mapper: @escaping @Sendable (SqlCursor) throws -> RowType
    ) throws -> AsyncThrowingStream<[RowType], any Error> {
        try watch(options: WatchOptions(sql: sql, parameters: parameters, mapper: mapper))
    }

    /// The number of watches currently observing the database.
    var activeWatchCount: Int { state.withLock { $0.watches.count } }
}
