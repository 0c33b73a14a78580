import GRDB
import Logging

/// Brings a database up to a ``Schema``, inside the caller's write transaction: creates missing tables,
/// indexes and columns. It never drops, renames or rewrites anything, and does no DDL at all when the
/// database already matches, so reopening is free.
struct SchemaApplier {
    let db: Database
    let logger: Logger

    func apply(_ schema: Schema) throws {
        for table in schema.tables {
            if try db.tableExists(table.name) {
                try addMissingColumns(of: table)
            } else {
                try createTable(table)
            }
            try createMissingIndexes(of: table)
        }
    }

    private func createTable(_ table: Table) throws {
        let columns =
            ["\(SqlIdentifier.quote("id")) TEXT PRIMARY KEY NOT NULL"]
            + table.columns.map { "\(SqlIdentifier.quote($0.name)) \($0.type.rawValue)" }
        try db.execute(sql: "CREATE TABLE \(SqlIdentifier.quote(table.name)) (\(columns.joined(separator: ", ")))")
        logger.debug("created table", metadata: ["table": "\(table.name)"])
    }

    private func addMissingColumns(of table: Table) throws {
        let existing = Set(try db.columns(in: table.name).map { $0.name.lowercased() })
        for column in table.columns where !existing.contains(column.name.lowercased()) {
            try db.execute(
                sql: "ALTER TABLE \(SqlIdentifier.quote(table.name)) "
                    + "ADD COLUMN \(SqlIdentifier.quote(column.name)) \(column.type.rawValue)"
            )
            logger.debug("added column", metadata: ["table": "\(table.name)", "column": "\(column.name)"])
        }
    }

    private func createMissingIndexes(of table: Table) throws {
        let existing = Set(try db.indexes(on: table.name).map { $0.name.lowercased() })
        for index in table.indexes where !existing.contains(index.sqlName(table: table.name).lowercased()) {
            let columns = index.columns.map { "\(SqlIdentifier.quote($0.column)) \($0.ascending ? "ASC" : "DESC")" }
            try db.execute(
                sql: "CREATE INDEX \(SqlIdentifier.quote(index.sqlName(table: table.name))) "
                    + "ON \(SqlIdentifier.quote(table.name)) (\(columns.joined(separator: ", ")))"
            )
            logger.debug("created index", metadata: ["table": "\(table.name)", "index": "\(index.name)"])
        }
    }
}
