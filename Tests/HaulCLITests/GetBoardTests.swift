import Foundation
import Testing

@testable import Haul
@testable import HaulCLI

/// When `haul get` knows that every download it waits for has ended: counted as events come,
/// never by a pass over all of them.
@Suite("haul get's board", .timeLimit(.minutes(1)))
struct GetBoardTests {
    private func completed(_ id: UUID, followed: [UUID] = []) -> DownloadEvent {
        var result = DownloadResult(
            taskID: id,
            path: "/tmp/\(id.uuidString)",
            bytes: 1,
            bytesFetched: 1,
            resumedFrom: nil,
            alreadyComplete: false
        )
        result.followed = followed
        return .completed(id: id, result: result)
    }

    private func failed(_ id: UUID) -> DownloadEvent {
        .failed(id: id, error: HaulError(.connection, "The server closed the connection"))
    }

    @Test("finished when each file given has ended, a file given twice and an outcome given twice counted once")
    func finishes() {
        let board = GetSession.Board()
        let (a, b, c) = (UUID(), UUID(), UUID())
        board.add(a, name: "a")
        board.add(b, name: "b")
        board.add(a, name: "a")  // The same URL twice: one task, two entries.
        board.add(c, name: "c")
        #expect(!board.apply(.stateChanged(id: a, from: .queued, to: .running, reason: .started)))
        #expect(!board.apply(failed(a)))
        #expect(!board.apply(completed(a)))  // Ended again (a retry): counted once.
        #expect(!board.apply(completed(UUID())))  // Not one of this command's.
        #expect(!board.apply(completed(b)))
        #expect(board.apply(failed(c)))
    }

    @Test("a Metalink's files are waited for, one that ended before it was listed included")
    func followed() {
        let board = GetSession.Board()
        let (metalink, early, late) = (UUID(), UUID(), UUID())
        board.add(metalink, name: "files.meta4")
        #expect(!board.apply(completed(early)))
        #expect(!board.apply(completed(metalink, followed: [early, late])))
        #expect(board.state.withLock { $0.order } == [metalink, early, late])
        #expect(board.apply(completed(late)))
    }

    @Test("an end that runs a hook waits for the hook's report")
    func hooks() {
        let board = GetSession.Board()
        let id = UUID()
        board.add(id, name: "a", hooks: Hooks(onComplete: "/bin/true"))
        #expect(!board.apply(completed(id)))
        #expect(board.apply(.hookFinished(id: id, run: HookRun(moment: .complete, program: "/bin/true"))))
    }
}
