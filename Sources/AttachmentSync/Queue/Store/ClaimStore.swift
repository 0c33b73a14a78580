import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The claims that let several processes of one app (the app and its share extension, say) use one
/// attachments table and folder: which process runs transfers (the lease), and which saves are in progress
/// (their files exist before their records, and no other process may take them for leftovers).
///
/// Claims live in a table of their own, `attachment_sync_claims`, which the queue creates in the app's
/// database; rows are keyed by the attachments table's name (`scope`), so queues on different tables never
/// meet. Nothing is held while a process is suspended or after it dies: the lease runs out unless renewed,
/// and a save's claim belongs to a process that can be found dead (or, where another process cannot be
/// asked, that is old).
struct ClaimStore: Sendable {
    /// The claims table.
    static let table = "attachment_sync_claims"
    /// The attachments table's name, as given: the claims' scope.
    let scope: String
    /// Which database this is, for this process's record of its saves in progress (two queues of one
    /// process on different databases, say two devices in a test, must not vouch for each other's claims).
    let database: String

    init(scope: String, database: String = "") {
        self.scope = scope
        self.database = database
    }

    /// A process as the claims name it: a token drawn at launch and its process id.
    struct Holder: Sendable, Hashable, CustomStringConvertible {
        let token: String
        let pid: Int32

        /// This process.
        static let current = Holder(token: UUID().uuidString.lowercased(), pid: getpid())

        var description: String { "process \(pid) (\(token.prefix(8)))" }

        /// Whether the process that made a claim still runs: `false` when it is certainly gone (its id names
        /// no process, or it is this process under an earlier token), `nil` when this process may not ask
        /// (a sandbox refuses the signal check; iOS does between an app and its extensions).
        var isAlive: Bool? {
            if pid == Holder.current.pid { return token == Holder.current.token }
            // 0 and negative ids name process groups to `kill`: no process claims with one.
            guard pid > 0 else { return false }
            if kill(pid, 0) == 0 { return true }
            return errno == ESRCH ? false : nil
        }
    }

    /// Who holds the lease, when another process does.
    struct LeaseHolder: Sendable, Equatable {
        let holder: Holder
        /// Milliseconds since 1970.
        let expiresAt: Int64
    }

    /// A save in progress, by the local file name it is writing.
    struct SaveClaim: Sendable, Equatable {
        let name: String
        let holder: Holder
        /// Milliseconds since 1970.
        let startedAt: Int64
    }

    /// The saves this process has in progress, by database, scope and name: the process's own claims are alive only
    /// while their save runs (one that failed without ending its claim left it behind, like a dead process).
    private static let savesInProgress = LockedValue<Set<[String]>>([])

    /// Notes that this process's saves of `names` run (`true`) or ended (`false`).
    func noteSavesInProgress(_ names: [String], _ running: Bool) {
        Self.savesInProgress.withLock { saves in
            for name in names {
                if running { saves.insert([database, scope, name]) } else { saves.remove([database, scope, name]) }
            }
        }
    }

    /// Whether the save that made `claim` may still run: `false` when its process is gone (or, for this
    /// process, when it no longer runs it), `nil` when this process cannot tell.
    func mayRun(_ claim: SaveClaim) -> Bool? {
        if claim.holder == Holder.current {
            return Self.savesInProgress.withLock { $0.contains([database, scope, claim.name]) }
        }
        return claim.holder.isAlive
    }

    private static let leaseKind = "lease"
    private static let saveKind = "save"

    /// Creates the claims table when it is missing.
    func createTable(in tx: SqlTransaction) throws {
        _ = try tx.execute(
            sql: """
                CREATE TABLE IF NOT EXISTS \(Self.table) (
                    scope TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, holder TEXT NOT NULL,
                    pid INTEGER NOT NULL, at INTEGER NOT NULL, PRIMARY KEY (scope, kind, name)
                ) WITHOUT ROWID
                """)
    }

    // MARK: The lease

    /// Takes or renews the lease for `holder` until `expiresAt` (milliseconds since 1970), unless another
    /// process holds it:
    /// - a process found gone (see ``Holder/isAlive``) holds nothing: its lease is taken at once;
    /// - a process that runs keeps it, renewed or not, for up to ``idleHolderLimit`` after it was last
    ///   taken (a syncing process that has nothing to transfer renews nothing; the limit covers a process id
    ///   reused by an unrelated process);
    /// - a process this one cannot ask about (iOS does not let an app signal its extensions) keeps it
    ///   until it runs out. A lease that ends further ahead than `longest` from `now` can only come from a
    ///   clock that was set back: it is taken as run out, or no process would transfer until the clock
    ///   caught up.
    ///
    /// Returns `nil` when `holder` has the lease now, else who has it.
    func takeLease(for holder: Holder, now: Int64, expiresAt: Int64, longest: Int64, in tx: SqlTransaction) throws
        -> LeaseHolder?
    {
        if let current = try lease(in: tx), current.holder != holder {
            let takenAt = current.expiresAt.addingClamped(-longest)
            switch current.holder.isAlive {
            case true? where now.addingClamped(-takenAt) < Self.idleHolderLimit && takenAt <= now:
                return current
            case nil where current.expiresAt > now && current.expiresAt.addingClamped(-now) <= longest:
                return current
            default:
                break
            }
        }
        _ = try tx.execute(
            sql: "INSERT OR REPLACE INTO \(Self.table) (scope, kind, name, holder, pid, at) VALUES (?, ?, '', ?, ?, ?)",
            parameters: [scope, Self.leaseKind, holder.token, Int(holder.pid), expiresAt])
        return nil
    }

    /// How long a running process keeps a lease it does not renew: 10 minutes.
    static let idleHolderLimit: Int64 = 600_000

    /// The lease as it stands (perhaps run out), or `nil` when nobody took one.
    func lease(in tx: SqlTransaction) throws -> LeaseHolder? {
        try tx.getOptional(
            sql: "SELECT holder, pid, at FROM \(Self.table) WHERE scope = ? AND kind = ? AND name = ''",
            parameters: [scope, Self.leaseKind]
        ) { cursor in
            LeaseHolder(
                holder: try Self.holder(cursor),
                expiresAt: try cursor.getInt64(name: "at"))
        }
    }

    /// Gives the lease up if `holder` has it.
    func releaseLease(of holder: Holder, in tx: SqlTransaction) throws {
        _ = try tx.execute(
            sql: "DELETE FROM \(Self.table) WHERE scope = ? AND kind = ? AND name = '' AND holder = ?",
            parameters: [scope, Self.leaseKind, holder.token])
    }

    // MARK: Saves in progress

    /// Claims the local file `names` for saves of `holder` starting at `now`. A name another process claims
    /// and still runs is not taken: returns it. A claim of a process that is gone is taken over.
    func claimSaves(_ names: [String], for holder: Holder, now: Int64, in tx: SqlTransaction) throws -> String? {
        for name in names {
            if let claim = try saveClaim(name, in: tx), claim.holder != holder, claim.holder.isAlive != false {
                return name
            }
        }
        for name in names {
            _ = try tx.execute(
                sql:
                    "INSERT OR REPLACE INTO \(Self.table) (scope, kind, name, holder, pid, at) VALUES (?, ?, ?, ?, ?, ?)",
                parameters: [scope, Self.saveKind, name, holder.token, Int(holder.pid), now])
        }
        return nil
    }

    /// Ends the claims of `holder` on `names` (its saves committed or failed). Returns how many it still had:
    /// fewer than `names.count` when another process took some over, having found this one gone.
    @discardableResult
    func endSaves(_ names: [String], of holder: Holder, in tx: SqlTransaction) throws -> Int {
        var ended = 0
        for name in names {
            ended += try tx.execute(
                sql: "DELETE FROM \(Self.table) WHERE scope = ? AND kind = ? AND name = ? AND holder = ?",
                parameters: [scope, Self.saveKind, name, holder.token])
        }
        return ended
    }

    /// Every save in progress (or left behind by a process that died).
    func saveClaims(in tx: SqlTransaction) throws -> [SaveClaim] {
        try tx.getAll(
            sql: "SELECT name, holder, pid, at FROM \(Self.table) WHERE scope = ? AND kind = ?",
            parameters: [scope, Self.saveKind]
        ) { cursor in
            SaveClaim(
                name: try cursor.getString(name: "name"),
                holder: try Self.holder(cursor),
                startedAt: try cursor.getInt64(name: "at"))
        }
    }

    /// Ends `holder`'s claim on `name` (the clean-up found its process gone).
    func dropSave(_ name: String, of holder: Holder, in tx: SqlTransaction) throws {
        _ = try tx.execute(
            sql: "DELETE FROM \(Self.table) WHERE scope = ? AND kind = ? AND name = ? AND holder = ?",
            parameters: [scope, Self.saveKind, name, holder.token])
    }

    private func saveClaim(_ name: String, in tx: SqlTransaction) throws -> SaveClaim? {
        try tx.getOptional(
            sql: "SELECT holder, pid, at FROM \(Self.table) WHERE scope = ? AND kind = ? AND name = ?",
            parameters: [scope, Self.saveKind, name]
        ) { cursor in
            SaveClaim(
                name: name,
                holder: try Self.holder(cursor),
                startedAt: try cursor.getInt64(name: "at"))
        }
    }

    private static func holder(_ cursor: SqlCursor) throws -> Holder {
        Holder(token: try cursor.getString(name: "holder"), pid: Int32(clamping: try cursor.getInt64(name: "pid")))
    }
}
