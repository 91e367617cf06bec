import Foundation
import HaulClient
import HaulTestSupport
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul
@testable import HaulCLI
@testable import HaulDaemon

/// What `haul watch` draws from live events, without a daemon.
@Suite(.timeLimit(.minutes(10))) struct WatchBoardTests {
    private let a = UUID(uuidString: "AAAAAAAA-0000-4000-8000-000000000001")!
    private let b = UUID(uuidString: "BBBBBBBB-0000-4000-8000-000000000002")!

    private func progress(_ id: UUID, received: Int64, total: Int64?, speed: Int64, eta: Int64?) -> EventRecord {
        var record = EventRecord(taskID: id, kind: .progress)
        record.received = received
        record.total = total
        record.bytesPerSecond = speed
        record.etaSeconds = eta
        return record
    }

    private func status(running: Int, waiting: Int, completed: Int) -> API.Status {
        API.Status(
            pid: 1,
            version: "test",
            startedAt: Date(),
            uptimeSeconds: 1,
            home: "/h",
            socket: "/h/daemon.sock",
            store: "/h/haul.sqlite",
            listen: nil,
            tasks: ["completed": completed],
            running: running,
            waiting: waiting,
            bytesPerSecond: 0,
            maxConcurrentDownloads: 3,
            maxDownloadsPerHost: 8,
            maxConnectionsPerHost: 16,
            eventStreams: 1
        )
    }

    @Test("one line per running task, sorted, with percent and ETA when known; a summary last")
    func linesForRunningTasks() {
        let board = WatchBoard()
        board.apply(progress(b, received: 100, total: nil, speed: 0, eta: nil))
        board.apply(progress(a, received: 512 << 10, total: 1 << 20, speed: 100 << 10, eta: 5))
        let lines = board.lines(status: status(running: 2, waiting: 4, completed: 7), session: "s")
        #expect(lines.count == 3, "\(lines)")
        #expect(lines[0].hasPrefix("aaaaaaaa  "), "\(lines)")
        #expect(lines[0].contains("(50%)") && lines[0].contains("ETA"), "\(lines[0])")
        #expect(lines[1].hasPrefix("bbbbbbbb  ") && !lines[1].contains("%") && !lines[1].contains("ETA"), "\(lines[1])")
        #expect(lines[2].hasPrefix("2 running, 4 waiting, 7 completed; "), "\(lines[2])")
        #expect(lines[2].hasSuffix(" (session s)"), "\(lines[2])")
    }

    @Test("a task leaves the board when it completes, fails or stops running; later progress updates in place")
    func tasksLeave() {
        let board = WatchBoard()
        board.apply(progress(a, received: 1, total: 10, speed: 1, eta: 9))
        board.apply(progress(b, received: 1, total: 10, speed: 1, eta: 9))
        board.apply(progress(a, received: 5, total: 10, speed: 1, eta: 5))
        var lines = board.lines(status: status(running: 2, waiting: 0, completed: 0), session: nil)
        #expect(lines.count == 3 && lines[0].contains("(50%)"), "\(lines)")

        var paused = EventRecord(taskID: b, kind: .state)
        paused.from = .running
        paused.to = .paused
        board.apply(paused)
        lines = board.lines(status: status(running: 1, waiting: 0, completed: 0), session: nil)
        #expect(lines.count == 2 && lines[0].hasPrefix("aaaaaaaa"), "\(lines)")

        board.apply(EventRecord(taskID: a, kind: .completed))
        lines = board.lines(status: status(running: 0, waiting: 0, completed: 1), session: nil)
        #expect(lines == [lines.last!] && lines[0].hasPrefix("0 running, 0 waiting, 1 completed; "), "\(lines)")
        #expect(!lines[0].contains("session"))
    }

    @Test("the status line says when the network holds tasks up; event lines give each move's reason and the network")
    func networkLines() {
        let board = WatchBoard()
        var held = status(running: 0, waiting: 0, completed: 1)
        held.network = API.Status.Network(
            interface: "wlan0",
            sourceAddress: "192.168.1.20",
            usable: false,
            metered: false,
            allowMetered: true,
            meteredInterfaces: ["wwan*"],
            waitingTasks: 2
        )
        #expect(board.lines(status: held, session: nil).last?.hasSuffix("; offline, 2 waiting for the network") == true)
        held.network?.usable = true
        held.network?.waitingTasks = 0
        #expect(board.lines(status: held, session: nil).last?.contains("network") == false)
        // A network event is about no task: the board keeps no line for it.
        var network = EventRecord(taskID: nil, kind: .network, time: nil)
        network.interface = "wlan0"
        network.address = "192.168.1.20"
        network.connected = true
        network.metered = true
        network.allowMetered = false
        board.apply(network)
        #expect(board.lines(status: held, session: nil).count == 1)
        #expect(
            EventText.line(network)
                == "network: default route via wlan0 (192.168.1.20), metered; metered networks not allowed"
        )
        var moved = EventRecord(taskID: a, kind: .state, time: nil)
        moved.from = .running
        moved.to = .waitingForNetwork
        moved.reason = .metered
        #expect(EventText.line(moved) == "aaaaaaaa  running -> waitingForNetwork (metered)")
        #expect(
            EventText.line(EventRecord(taskID: nil, kind: .network, time: nil)).hasSuffix(
                "network: no default route; metered networks allowed"
            )
        )
    }

    @Test("haul list keeps its columns: a failed or offline task's state is one word, its reason a line below")
    func listColumns() {
        func info(_ id: UUID, _ state: TaskState, error: String?) -> DownloadInfo {
            DownloadInfo(
                id: id,
                url: URL(string: "http://u:SECRET@h/\(state.rawValue).bin")!,
                path: "/d/\(state.rawValue).bin",
                directory: "/d",
                state: state,
                priority: 0,
                bytesCommitted: 0,
                totalBytes: nil,
                errorMessage: error,
                session: "default"
            )
        }
        let table = DaemonOutput.table([
            info(a, .failed, error: "HTTP 404 Not Found for http://u:SECRET@h/failed.bin. Check the URL"),
            info(b, .waitingForNetwork, error: "Waiting for the network: no usable route to the server"),
        ])
        let lines = table.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(lines[0].hasPrefix("ID        STATE    DONE"), "\(table)")
        #expect(lines[1].hasPrefix("aaaaaaaa  failed   -"), "\(table)")
        #expect(lines[2].hasPrefix("bbbbbbbb  offline  -"), "\(table)")
        // Every row's FILE column starts where the header's does.
        let column = lines[0].count - "FILE".count
        #expect(lines[1].dropFirst(column) == "failed.bin", "\(table)")
        #expect(lines[2].dropFirst(column) == "waitingForNetwork.bin", "\(table)")
        #expect(lines.contains("aaaaaaaa: failed: HTTP 404 Not Found for http://u:***@h/failed.bin. Check the URL"))
        #expect(lines.contains("bbbbbbbb: Waiting for the network: no usable route to the server"))
        #expect(!table.contains("SECRET"))
    }

    @Test("in fleet mode haul list adds a NODE column (the daemon running each task) and haul status lists the nodes")
    func fleetColumns() {
        func info(_ id: UUID, _ state: TaskState, node: String?) -> DownloadInfo {
            var info = DownloadInfo(
                id: id,
                url: URL(string: "http://h/\(state.rawValue).bin")!,
                path: "/d/\(state.rawValue).bin",
                directory: "/d",
                state: state,
                priority: 0,
                bytesCommitted: 0,
                totalBytes: nil,
                errorMessage: nil,
                session: "default"
            )
            info.node = node
            return info
        }
        let table = DaemonOutput.table([info(a, .running, node: "worker-7"), info(b, .queued, node: nil)])
        let lines = table.split(separator: "\n").map(String.init)
        #expect(lines[0].hasPrefix("ID        STATE    DONE  SIZE  SESSION  NODE      FILE"), "\(table)")
        #expect(lines[1].hasPrefix("aaaaaaaa  running  -     ?     default  worker-7  running.bin"), "\(table)")
        #expect(lines[2].hasPrefix("bbbbbbbb  queued   -     ?     default  -         queued.bin"), "\(table)")
        // Without a node anywhere (one machine), no column.
        #expect(!DaemonOutput.table([info(b, .queued, node: nil)]).contains("NODE"))

        let now = Date(timeIntervalSince1970: 2_000_000_000)
        let fleet = API.Status.Fleet(
            node: "n1",
            store: "postgres://haul:***@db:5432/haul",
            leaseSeconds: 15,
            nodes: [
                .init(
                    name: "n0",
                    startedAt: now,
                    heartbeatAt: now - 4,
                    bytesPerSecond: 2_000_000,
                    leases: 3,
                    stoppedAt: nil,
                    maxConcurrentDownloads: 4,
                    overallRateLimit: 10 << 20
                ),
                .init(
                    name: "n1",
                    startedAt: now,
                    heartbeatAt: now - 1,
                    bytesPerSecond: 0,
                    leases: 0,
                    stoppedAt: nil,
                    maxConcurrentDownloads: 2
                ),
                .init(name: "n2", startedAt: now, heartbeatAt: now - 60, bytesPerSecond: 0, leases: 0, stoppedAt: now),
                .init(name: "n3", startedAt: now, heartbeatAt: now - 20, bytesPerSecond: 0, leases: 1, stoppedAt: nil),
            ],
            caps: API.FleetCaps(maxDownloadsPerHost: 4)
        )
        let text = DaemonOutput.fleet(fleet, now: now).split(separator: "\n").map(String.init)
        #expect(text[0] == "fleet:    node n1, leases of 15 s", "\(text)")
        #expect(text[1] == "caps:     4 per host", "\(text)")
        #expect(text[2] == "  NODE       STATE    RUNNING  LIMIT       HEARTBEAT  SPEED", "\(text)")
        #expect(text[3] == "  n0         running  3 of 4   10.0 MiB/s  4 s ago    1.91 MiB/s", "\(text)")
        #expect(text[4] == "  n1 (this)  running  0 of 2   none        1 s ago    0 B/s", "\(text)")
        #expect(text[5] == "  n2         left     0 of ?   none        -          0 B/s", "\(text)")
        // Silent past a lease without leaving: gone (its leases run out for others to take).
        #expect(text[6] == "  n3         gone     1 of ?   none        20 s ago   0 B/s", "\(text)")
        let uncapped = API.Status.Fleet(node: "n1", store: "", leaseSeconds: 15, nodes: [], caps: API.FleetCaps())
        #expect(DaemonOutput.fleet(uncapped, now: now).contains("caps:     none (each node's own limits)"))
    }

    @Test("haul watch shows each task by its file name once known, by its id until then")
    func fileNames() {
        let board = WatchBoard()
        board.apply(progress(a, received: 10, total: 100, speed: 5, eta: nil))
        #expect(board.unnamed == [a])
        #expect(
            board.lines(status: status(running: 1, waiting: 0, completed: 0), session: nil)[0].hasPrefix("aaaaaaaa  ")
        )
        board.name(a, "big.iso")
        #expect(board.unnamed.isEmpty)
        board.apply(progress(a, received: 50, total: 100, speed: 5, eta: nil))
        let line = board.lines(status: status(running: 1, waiting: 0, completed: 0), session: nil)[0]
        #expect(line.hasPrefix("big.iso  50 B of 100 B (50%)"), "\(line)")
    }

    @Test("haul get's progress line keeps its width as the speed and the ETA become known and change")
    func steadyBar() {
        func line(received: Int64, speed: Double) -> String {
            let progress = DownloadProgress(
                bytesReceived: received,
                totalBytes: 10 << 20,
                bytesThisRun: received,
                resumedFrom: nil,
                bytesPerSecond: speed,
                fileName: "big.iso"
            )
            return ProgressRenderer.barLine(progress, name: "big.iso", width: 100)
        }
        let lines = [
            line(received: 0, speed: 0), line(received: 512, speed: 0), line(received: 1 << 20, speed: 900),
            line(received: 5 << 20, speed: 1_200_000), line(received: 10 << 20, speed: 80_000_000),
        ]
        // The bar itself keeps its size (the line's length always did: the bar took up the slack).
        let bars = lines.map { $0.filter { "█░".contains($0) }.count }
        #expect(Set(bars).count == 1 && bars[0] > 10, "\(lines)")
        #expect(Set(lines.map(\.count)) == [lines[0].count], "\(lines)")
        #expect(lines[0].contains("--/s  ETA    --:--"), "\(lines[0])")
        #expect(lines[3].hasSuffix("5.00 MiB/10.0 MiB    1.14 MiB/s  ETA     0:04"), "\(lines[3])")
    }
}
