import Foundation

// MARK: - Hooks: programs run when a download ends

extension DownloadManager {
    /// A download's end, as its hooks are told of it.
    enum Ending: Sendable {
        case completed(DownloadResult)
        case failed(HaulError)

        var moment: Hooks.Moment {
            switch self {
            case .completed: .complete
            case .failed: .error
            }
        }
    }

    /// Announces a task's end, and runs the hook for it, if it has one (its own, else the
    /// manager's). The hook runs beside the downloads; ``run()`` ends only once every hook
    /// started has ended.
    /// - Parameter mayHaveHooks: false when the task is known to have none of its own: with
    ///   no manager hook either, nothing is run and its record is not read.
    func ended(_ id: UUID, _ ending: Ending, mayHaveHooks: Bool = true) {
        switch ending {
        case .completed(let result): hub.publish(.completed(id: id, result: result))
        case .failed(let error):
            HaulMetrics.failure(error.code)
            hub.publish(.failed(id: id, error: error))
        }
        if mayHaveHooks || hooks != .none { hookSink.yield((id, ending)) }
    }

    /// Runs the hooks ``ended(_:_:)`` asks for until the manager stops and the last has ended.
    nonisolated func runHooks() async {
        await withDiscardingTaskGroup { group in
            for await (id, ending) in hookRequests {
                group.addTask { await self.runHook(id, ending) }
            }
        }
    }

    /// Runs one task's hook for `ending`, if it has one, logs how it went, and says so in an event.
    private nonisolated func runHook(_ id: UUID, _ ending: Ending) async {
        guard let record = try? await store.task(id: id),
            let program = record.hooks.over(hooks).program(for: ending.moment)
        else { return }
        let url = Redaction.url(HTTPTransport.withoutCredentials(record.url))
        var path = record.destinationPath ?? ""
        var variables = [
            "HAUL_EVENT": ending.moment.rawValue, "HAUL_TASK_ID": id.shown, "HAUL_URL": url,
            "HAUL_SESSION": record.session,
        ]
        switch ending {
        case .completed(let result):
            path = result.path
            variables["HAUL_BYTES"] = "\(result.bytes)"
        case .failed(let error):
            variables["HAUL_ERROR"] = error.description
            variables["HAUL_ERROR_CODE"] = error.code.description
        }
        variables["HAUL_PATH"] = path
        let run = await HookRunner.run(
            ending.moment,
            program: program,
            arguments: [id.shown, path, url],
            variables: variables,
            timeout: hookTimeout
        )
        if let failure = run.failure {
            logger.warning(
                "the --on-\(ending.moment.rawValue) hook failed; the download's outcome stands",
                metadata: ["haul.task": "\(id)", "program": "\(program)", "reason": "\(failure)"]
            )
        } else {
            logger.info("hook ran", metadata: ["haul.task": "\(id)", "program": "\(program)"])
        }
        hub.publish(.hookFinished(id: id, run: run))
    }
}
