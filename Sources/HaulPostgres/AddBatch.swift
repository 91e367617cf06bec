import Foundation
import Haul
import Logging
import PostgresNIO

/// A batch of adds in a handful of statements whatever its size: one query finds the tasks
/// already there for any of its destinations, one gives the new ones their queue positions,
/// and the new tasks and their first segments are inserted a thousand rows at a time.
/// Adds of a destination already there are re-adds (``TaskReAdd``), written one by one as
/// before. The caller holds the add lock, in one transaction: a batch is added whole or not
/// at all.
struct AddBatch {
    let tables: PostgresTables
    let logger: Logger

    typealias Item = (new: TaskRecord, reAdd: TaskReAdd)
    typealias Added = (record: TaskRecord, segments: [SegmentRecord], isNew: Bool)

    /// The rows of one insert: PostgreSQL takes at most 65,535 parameters a statement.
    static let rowsPerInsert = 1_000

    /// What makes two adds the same task: the unique index `haul_task_one_per_destination`.
    private struct Destination: Hashable {
        let url: String
        let directory: String
        let explicitName: Bool
        let name: String

        init(_ task: TaskRecord) {
            url = task.url.absoluteString
            directory = task.directory
            explicitName = task.explicitName
            name = task.explicitName ? task.fileName ?? "" : ""
        }
    }

    func findOrInsert(
        _ connection: PostgresConnection,
        _ items: [Item],
        accept: (TaskRecord) throws -> Void
    ) async throws -> [Added] {
        // A destination named again in the batch starts a part of its own, which finds the
        // task the part before added.
        var results: [Added] = []
        var part: [Item] = []
        var named: Set<Destination> = []
        for item in items {
            if !named.insert(Destination(item.new)).inserted {
                results += try await findOrInsertDistinct(connection, part, accept: accept)
                (part, named) = ([], [Destination(item.new)])
            }
            part.append(item)
        }
        return results + (try await findOrInsertDistinct(connection, part, accept: accept))
    }

    /// ``findOrInsert(_:_:accept:)`` of adds to different destinations.
    private func findOrInsertDistinct(
        _ connection: PostgresConnection,
        _ items: [Item],
        accept: (TaskRecord) throws -> Void
    ) async throws -> [Added] {
        guard !items.isEmpty else { return [] }
        let destinations = items.map { Destination($0.new) }
        let found = try await existing(connection, destinations)
        var results: [Added?] = Array(repeating: nil, count: items.count)
        var fresh: [(index: Int, task: TaskRecord)] = []
        for (index, item) in items.enumerated() {
            guard var existing = found[index] else {
                fresh.append((index, item.new))
                continue
            }
            try accept(existing)
            item.reAdd.apply(to: &existing)
            existing.updatedAt = Date()
            try await tables.update(connection, existing, columns: TaskTable.requestColumns)
            if let pieces = item.new.pieces { try await tables.insertPieces(connection, taskID: existing.id, pieces) }
            results[index] = (existing, try await tables.segments(connection, of: existing), false)
        }
        let inserted = try await insert(connection, fresh.map(\.task))
        for ((index, _), task) in zip(fresh, inserted) {
            results[index] = (task, [SegmentRecord(taskID: task.id, ordinal: 0, start: 0, committed: 0)], true)
        }
        return results.compactMap { $0 }
    }

    /// The unfinished or completed task at each destination there is one for, by the
    /// destination's index, in one query (the unique index finds each).
    private func existing(
        _ connection: PostgresConnection,
        _ destinations: [Destination]
    ) async throws -> [Int: TaskRecord] {
        var found: [Int: TaskRecord] = [:]
        let sql = """
            SELECT \(TaskTable.columns.map { "t.\"\($0.name)\"" }.joined(separator: ", ")), k.i
            FROM unnest($1::text[], $2::text[], $3::boolean[], $4::text[]) WITH ORDINALITY
                AS k(url, directory, explicit, name, i)
            JOIN haul_task t ON t.url = k.url AND t.directory = k.directory AND t."explicitName" = k.explicit
                AND (CASE WHEN t."explicitName" THEN t."fileName" ELSE '' END) = k.name
                AND t.state <> 'cancelled'
            """
        var binds = PostgresBindings()
        binds.append(destinations.map(\.url))
        binds.append(destinations.map(\.directory))
        binds.append(destinations.map(\.explicitName))
        binds.append(destinations.map(\.name))
        for try await row in try await connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger) {
            let ordinal = try row.makeRandomAccess()[TaskTable.columns.count].decode(Int64.self)
            guard ordinal >= 1, ordinal <= destinations.count else { continue }
            found[Int(ordinal) - 1] = try TaskTable.record(row)
        }
        return found
    }

    /// Inserts new tasks (every column) at the back of the queue in their order, each with
    /// its first segment and its piece hashes; returns them with their queue positions.
    private func insert(_ connection: PostgresConnection, _ tasks: [TaskRecord]) async throws -> [TaskRecord] {
        guard !tasks.isEmpty else { return [] }
        var orders: [Int64] = []
        for try await order in try await connection.query(
            "SELECT nextval('haul_queue_order') FROM generate_series(1, \(Int64(tasks.count)))",
            logger: logger
        ).decode(Int64.self) {
            orders.append(order)
        }
        guard orders.count == tasks.count else { throw HaulError(.store, "PostgreSQL gave no queue position") }
        let queued = zip(tasks, orders.sorted()).map { task, order in
            var task = task
            task.queueOrder = order
            return task
        }
        var start = 0
        while start < queued.count {
            let rows = queued[start..<min(start + Self.rowsPerInsert, queued.count)]
            try await insertRows(connection, rows)
            start += rows.count
        }
        for task in queued {
            if let pieces = task.pieces { try await tables.insertPieces(connection, taskID: task.id, pieces) }
        }
        _ = try await connection.query(
            """
            INSERT INTO haul_segment ("taskID", ordinal, start, "end", committed)
            SELECT id, 0, 0, NULL, 0 FROM unnest(\(queued.map(\.id))::uuid[]) AS id
            """,
            logger: logger
        )
        return queued
    }

    /// One multi-row insert of tasks, with the host each counts under for the fleet's
    /// per-host cap.
    private func insertRows(_ connection: PostgresConnection, _ tasks: ArraySlice<TaskRecord>) async throws {
        var binds = PostgresBindings()
        var rows: [String] = []
        let width = TaskTable.columns.count + 1
        for (row, task) in tasks.enumerated() {
            let values = try task.databaseDictionary
            for column in TaskTable.columns {
                try TaskTable.bind(values[column.name] ?? .null, of: column.name, task: task.id, to: &binds)
            }
            binds.append(DownloadManager.hostKey(task.url))
            rows.append("(" + (1...width).map { "$\(row * width + $0)" }.joined(separator: ", ") + ")")
        }
        _ = try await connection.query(
            PostgresQuery(
                unsafeSQL:
                    "INSERT INTO haul_task (\(TaskTable.selectList), host) VALUES \(rows.joined(separator: ", "))",
                binds: binds
            ),
            logger: logger
        )
    }
}
