/// Where a task that is not running was when its stop began (``ManagerMachine/stopBegins(_:)``):
/// where it goes back to if the stop is refused.
struct StopOrigin: Equatable, Sendable {
    /// Held for the store (it refused a write).
    let heldForStore: Bool
    /// In the line (with a shared queue, only a task claimed here is).
    let inLine: Bool
}
