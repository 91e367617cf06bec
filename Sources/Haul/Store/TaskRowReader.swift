import Foundation
import GRDB
import Synchronization

/// Reads a task's columns, turning any value that is not what Haul wrote into one
/// sentence naming the task and the column.
struct TaskRowReader {
    let row: Row
    let taskID: UUID
    /// Where each column is in the row, when the row holds ``TaskRecord/storedColumns`` in
    /// their order (the task reads of ``TaskTables``): found by name otherwise, which GRDB
    /// does by lowercasing the name and looking it up twice, forty times a row.
    let positions: [String: Int]?

    init(row: Row, positions: [String: Int]?) throws {
        self.row = row
        self.positions = positions
        do {
            taskID =
                if let index = positions?[TaskRecord.Columns.id.name] { try row.decode(atIndex: index) } else {
                    try row.decode(forColumn: TaskRecord.Columns.id)
                }
        } catch {
            // Not GRDB's error: it shows the whole row, request headers and all.
            throw HaulError(
                .store,
                "A task in the Haul store cannot be read: its id is not a task id",
                hint: "Point HAUL_HOME at another directory, or delete that row with sqlite3"
            )
        }
    }

    func unreadable(_ column: Column, _ what: String) -> HaulError {
        HaulError(
            .store,
            "Task \(taskID.shown) in the Haul store cannot be read: its \(column.name) \(what)",
            hint: "Remove it with 'haul remove \(taskID.shown)', or point HAUL_HOME at another directory"
        )
    }

    func value<Value: DatabaseValueConvertible>(_ column: Column) throws -> Value {
        do {
            if let index = positions?[column.name] { return try row.decode(Value.self, atIndex: index) }
            return try row.decode(Value.self, forColumn: column)
        } catch {
            throw unreadable(column, "holds a value of the wrong type")
        }
    }

    func url(_ column: Column) throws -> URL {
        let text: String = try value(column)
        return try parsedURL(text, column)
    }

    func optionalURL(_ column: Column) throws -> URL? {
        let text: String? = try value(column)
        return try text.map { try parsedURL($0, column) }
    }

    private func parsedURL(_ text: String, _ column: Column) throws -> URL {
        guard let url = URL(string: text) else { throw unreadable(column, "is not a URL") }
        return url
    }

    func headers(_ column: Column) throws -> [HTTPHeaderField] {
        let text: String = try value(column)
        if text == "[]" { return [] }
        do {
            return try JSONDecoder().decode([HTTPHeaderField].self, from: Data(text.utf8))
        } catch {
            throw unreadable(column, "is not a list of headers")
        }
    }

    func checksum(_ column: Column) throws -> Checksum? {
        let text: String? = try value(column)
        return try text.map { text in
            do {
                return try Checksum(parsing: text)
            } catch {
                throw unreadable(column, "is not a checksum")
            }
        }
    }

    /// The TLS options last read, by their text: tasks share theirs (the system's
    /// authorities, verified), and decoding the JSON cost more than the rest of the row.
    private static let lastTLS = Mutex<(text: String, options: TLSOptions)?>(nil)

    func tls(_ column: Column) throws -> TLSOptions {
        guard let text: String = try value(column) else { return TLSOptions() }
        if let last = Self.lastTLS.withLock({ $0 }), last.text == text { return last.options }
        do {
            let options = try JSONDecoder().decode(TLSOptions.self, from: Data(text.utf8))
            try options.validate()
            Self.lastTLS.withLock { $0 = (text, options) }
            return options
        } catch {
            throw unreadable(column, "is not a set of TLS options")
        }
    }

    func proxy(_ column: Column) throws -> ProxySettings {
        guard let text: String = try value(column) else { return .direct }
        do {
            let settings = try JSONDecoder().decode(ProxySettings.self, from: Data(text.utf8))
            try settings.validate()
            return settings
        } catch {
            throw unreadable(column, "is not a set of proxy settings")
        }
    }

    func json<Value: Decodable>(
        _ column: Column,
        default empty: Value,
        what: String,
        check: (Value) throws -> Void
    ) throws -> Value {
        guard let text: String = try value(column) else { return empty }
        do {
            let decoded = try JSONDecoder().decode(Value.self, from: Data(text.utf8))
            try check(decoded)
            return decoded
        } catch {
            throw unreadable(column, "is not \(what)")
        }
    }

    func state(_ column: Column) throws -> TaskState {
        let text: String = try value(column)
        guard let state = TaskState(rawValue: text) else { throw unreadable(column, "'\(text)' is not a state") }
        return state
    }

    func optionalDate(_ column: Column) throws -> Date? {
        guard let text: String = try value(column) else { return nil }
        guard let date = StoreDate.date(text) else { throw unreadable(column, "is not a date") }
        return date
    }

    func date(_ column: Column) throws -> Date {
        let value: DatabaseValue = if let index = positions?[column.name] { row[index] } else { row[column] }
        guard let date = StoreDate.date(value) else {
            throw unreadable(column, "is not a date")
        }
        return date
    }
}
