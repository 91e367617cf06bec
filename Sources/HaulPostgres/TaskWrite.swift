import Foundation
import GRDB
import Haul
import Logging
import PostgresNIO

/// One statement that writes a task's row — and, when given, claims its part file and
/// replaces its segments — only while this node's lease holds (``LeaseBook/Fence``), and
/// says whether it wrote: the fence check, the write and the segments in one round trip,
/// instead of a transaction of several (`BEGIN`, the check, each write, `COMMIT`). A task's
/// hot path in a fleet (its response, its checkpoints, its completion) is each one of these.
///
/// The segments are replaced without a delete before the insert: the new ones are inserted
/// or updated in place by their ordinal, and those beyond them deleted — rows the two parts
/// of the statement never share.
struct TaskWrite: Sendable {
    private var assignments: [String] = []
    private var binds = PostgresBindings()
    private var count = 0
    private var claimedPath: String?
    private var segments: [SegmentRecord]?

    /// The write of a checkpoint: the segments, the sources when they changed, the time;
    /// with `completing`, the task completed (its part file forgotten, its lease ended).
    static func checkpoint(_ checkpoint: CheckpointRecord?, completing: Bool) throws -> TaskWrite {
        var write = TaskWrite()
        if completing { write.set(state: .completed, forgettingPart: true) }
        if let sources = checkpoint?.sources { write.set("sources", JSONB(try TaskRecord.json(sources))) }
        write.set("updatedAt", Date())
        if let segments = checkpoint?.segments { write.replaceSegments(with: segments) }
        return write
    }

    /// `$n` for `value`, bound.
    private mutating func bind(_ value: some PostgresNonThrowingEncodable & Sendable) -> String {
        binds.append(value)
        count += 1
        return "$\(count)"
    }

    private mutating func bindNull() -> String {
        binds.appendNull()
        count += 1
        return "$\(count)"
    }

    /// Writes `columns` of `task` (one group's), as the record encodes them.
    mutating func set(columns: [String], of task: TaskRecord) throws {
        let values = try task.databaseDictionary
        for column in columns {
            try TaskTable.bind(values[column] ?? .null, of: column, task: task.id, to: &binds)
            count += 1
            assignments.append("\"\(column)\" = $\(count)")
        }
    }

    /// Records `state`, as ``PostgresTables/setState(_:_:_:error:code:forgettingPart:)``
    /// does: the error and its code, no next try, the streak of tries kept only while the
    /// task may still be tried, the part file forgotten when asked, and the lease ended
    /// unless the task runs.
    mutating func set(state: TaskState, error: String? = nil, code: HaulError.Code? = nil, forgettingPart: Bool = false)
    {
        let keepsStreak = state == .queued || state == .running || state == .failed
        let value = bind(state.rawValue)
        let message = error.map { bind($0) } ?? bindNull()
        let codeName = code.map { bind($0.description) } ?? bindNull()
        var written = [
            "state = \(value)::text", "\"errorMessage\" = \(message)::text", "\"errorCode\" = \(codeName)::text",
            "\"nextTryAt\" = NULL",
        ]
        if !keepsStreak { written.append("\"retryingSince\" = NULL") }
        if forgettingPart { written += ["\"partPath\" = NULL", "\"partIdentity\" = NULL"] }
        if state != .running { written += ["owner = NULL", "lease_expires = NULL"] }
        assignments += written
    }

    /// Writes `column` = `value` (a fixed column name, never input).
    mutating func set(_ column: String, _ value: some PostgresNonThrowingEncodable & Sendable) {
        let placeholder = bind(value)
        assignments.append("\"\(column)\" = \(placeholder)")
    }

    /// Records `path` as the task's part file unless another task records it; the statement
    /// then answers whether the claim held.
    mutating func claimPart(path: String, identity: String?, of id: UUID) {
        let (path, identity, other) = (bind(path), identity.map { bind($0) } ?? bindNull(), bind(id))
        let free = "NOT EXISTS (SELECT 1 FROM haul_task o WHERE o.\"partPath\" = \(path)::text AND o.id <> \(other))"
        assignments.append(contentsOf: [
            "\"partPath\" = CASE WHEN \(free) THEN \(path)::text ELSE \"partPath\" END",
            "\"partIdentity\" = CASE WHEN \(free) THEN \(identity)::text ELSE \"partIdentity\" END",
        ])
        claimedPath = path
    }

    /// Replaces the task's segments with `segments`.
    mutating func replaceSegments(with segments: [SegmentRecord]) { self.segments = segments }

    /// The statement for task `id` under `fence`: its one row says whether it wrote (the
    /// lease held, or there was none to check) and, with a part file claimed, whether the
    /// claim held. No row: the fence did not hold (or there is no such task).
    func query(id: UUID, fence: LeaseBook.Fence) -> PostgresQuery {
        var write = self
        let task = write.bind(id)
        let (node, token) = (write.bind(fence.node), fence.token.map { write.bind($0) } ?? write.bindNull())
        let claimed = claimedPath.map { "\"partPath\" IS NOT DISTINCT FROM \($0)::text" } ?? "true"
        var sql = """
            WITH task AS (
                UPDATE haul_task SET \(write.assignments.joined(separator: ", "))
                WHERE id = \(task) AND (\(token)::bigint IS NULL OR (owner = \(node)::text AND fence = \(token)::bigint
                    AND state = 'running' AND lease_expires > now()))
                RETURNING \(claimed) AS claimed
            )
            """
        if let segments {
            let ordinals = write.bind(segments.map { Int64($0.ordinal) })
            let (starts, open) = (write.bind(segments.map(\.start)), write.bind(segments.map { $0.end == nil }))
            let (ends, committed) = (write.bind(segments.map { $0.end ?? 0 }), write.bind(segments.map(\.committed)))
            sql += """
                , gone AS (
                    DELETE FROM haul_segment WHERE "taskID" = \(task) AND ordinal <> ALL(\(ordinals)::bigint[])
                        AND EXISTS (SELECT 1 FROM task)
                ), placed AS (
                    INSERT INTO haul_segment ("taskID", ordinal, start, "end", committed)
                    SELECT \(task), s.ordinal, s.start, CASE WHEN s.open THEN NULL ELSE s."end" END, s.committed
                    FROM unnest(\(ordinals)::bigint[], \(starts)::bigint[], \(open)::boolean[], \(ends)::bigint[],
                        \(committed)::bigint[]) AS s(ordinal, start, open, "end", committed)
                    WHERE EXISTS (SELECT 1 FROM task)
                    ON CONFLICT ("taskID", ordinal) DO UPDATE
                        SET start = EXCLUDED.start, "end" = EXCLUDED."end", committed = EXCLUDED.committed
                )
                """
        }
        sql += "\nSELECT claimed FROM task"
        return PostgresQuery(unsafeSQL: sql, binds: write.binds)
    }

    /// Runs the statement (``query(id:fence:)``) on `connection`: nil when it wrote nothing
    /// (the fence did not hold, or there is no such task); else whether a part file claimed
    /// is the task's (true when none was claimed).
    func run(on connection: PostgresConnection, id: UUID, fence: LeaseBook.Fence, logger: Logger) async throws -> Bool?
    {
        var claimed: Bool?
        for try await value in try await connection.checkedQuery(query(id: id, fence: fence), logger: logger)
            .decode(Bool.self)
        {
            claimed = value
        }
        return claimed
    }
}
