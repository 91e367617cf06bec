import Foundation
import HaulTestSupport
import HaulTesting
import Testing

/// `haul`'s main thread waits for its command rather than ending in `dispatch_main()`'s
/// `pthread_exit`, whose unwinding of the main thread's stack reads the program's unwind
/// tables: about a megabyte of them stayed resident for the rest of every run
/// (docs/benchmarks.md, "The main thread kept").
@Suite("haul's main thread", .tags(.process), .timeLimit(.minutes(2)))
struct MainThreadTests {
    @Test("a running haul get has not read the program's unwind tables (.eh_frame_hdr, .eh_frame)")
    func unwindTablesNotRead() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/slow", .init(size: 8 << 20, seed: 1, bytesPerSecond: 256 << 10))
            let child = try HaulProcess(
                ["get", "-q", "-x", "1", server.url("/slow").absoluteString],
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(try await waitUntil { server.bodyBytesSent("/slow") > 100_000 })
            // Measured before the child is stopped, which happens whatever the measure met.
            let measured = Result { () throws -> [(name: String, count: ResidentPages.Count)] in
                let program = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(child.pid)/exe")
                let sections = try ELFSections(path: program)
                return try [".eh_frame_hdr", ".eh_frame"].map { name in
                    let section = try #require(sections.named(name), "no \(name) in \(program)")
                    return (name, try ResidentPages.count(pid: child.pid, file: program, offsets: section))
                }
            }
            child.kill(SIGKILL)
            _ = await child.finish()
            // Unwinding the main thread's stack left 85 and 32 pages of these resident in a
            // debug build, 145 and 100 in a release one.
            let counts = try measured.get()
            for (name, count) in counts {
                #expect(count.mapped > 16, "\(name) is mapped: \(count)")
                #expect(count.resident < 16, "pages of \(name) resident: \(count)")
            }
        }
    }
}

/// The file offsets of an ELF64 (little-endian) file's sections, by name.
struct ELFSections {
    private var sections: [String: Range<UInt64>] = [:]

    init(path: String) throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: path), options: .alwaysMapped)
        let end = UInt64(data.count)
        // Offsets come from the file: wrapping arithmetic, and every read checked against its end.
        func read<T: FixedWidthInteger>(_: T.Type, at offset: UInt64) throws -> T {
            let size = UInt64(MemoryLayout<T>.size)
            guard offset <= end, size <= end - offset else { throw CocoaError(.fileReadCorruptFile) }
            let start = Int(offset)
            return data[start..<start + Int(size)].withUnsafeBytes { T(littleEndian: $0.loadUnaligned(as: T.self)) }
        }
        guard data.prefix(5) == Data([0x7F, 0x45, 0x4C, 0x46, 2]) else { throw CocoaError(.fileReadCorruptFile) }
        let table = try read(UInt64.self, at: 0x28)
        let entrySize = UInt64(try read(UInt16.self, at: 0x3A))
        let count = UInt64(try read(UInt16.self, at: 0x3C))
        let namesIndex = UInt64(try read(UInt16.self, at: 0x3E))
        let namesOffset = try read(UInt64.self, at: table &+ namesIndex * entrySize &+ 0x18)
        for index in 0..<count {
            let entry = table &+ index * entrySize
            var nameStart = namesOffset &+ UInt64(try read(UInt32.self, at: entry))
            var name = ""
            while case let byte = try read(UInt8.self, at: nameStart), byte != 0 {
                name.append(Character(Unicode.Scalar(byte)))
                nameStart &+= 1
            }
            let offset = try read(UInt64.self, at: entry &+ 0x18)
            let size = try read(UInt64.self, at: entry &+ 0x20)
            guard offset <= end, size <= end - offset else { throw CocoaError(.fileReadCorruptFile) }
            sections[name] = offset..<offset + size
        }
    }

    func named(_ name: String) -> Range<UInt64>? { sections[name] }
}

/// How many pages of a file's range a process has mapped, and how many of those are in
/// memory (`/proc/PID/pagemap`'s present bit, readable without privileges).
enum ResidentPages {
    struct Count: CustomStringConvertible {
        var mapped = 0
        var resident = 0
        var description: String { "\(resident) of \(mapped) pages" }
    }

    static func count(pid: Int32, file: String, offsets: Range<UInt64>) throws -> Count {
        let page: UInt64 = 4096
        let maps = try String(contentsOfFile: "/proc/\(pid)/maps", encoding: .utf8)
        let pagemap = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/proc/\(pid)/pagemap"))
        defer { try? pagemap.close() }
        var count = Count()
        for line in maps.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 6, fields[5] == file else { continue }
            let bounds = fields[0].split(separator: "-").compactMap { UInt64($0, radix: 16) }
            guard bounds.count == 2, let mapOffset = UInt64(fields[2], radix: 16) else { continue }
            let mapped = mapOffset..<mapOffset + bounds[1] - bounds[0]
            let lower = max(mapped.lowerBound, offsets.lowerBound / page * page)
            let upper = min(mapped.upperBound, offsets.upperBound)
            var offset = lower
            while offset < upper {
                try pagemap.seek(toOffset: (bounds[0] + offset - mapOffset) / page * 8)
                let entry = try pagemap.read(upToCount: 8) ?? Data()
                let bits = entry.count == 8 ? entry.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) } : 0
                count.mapped += 1
                if bits >> 63 == 1 { count.resident += 1 }
                offset += page
            }
        }
        return count
    }
}
