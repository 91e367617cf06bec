/// The host names a manager has seen, each kept once and known by a number: a queue of a
/// million tasks on a few hosts holds a few strings, not a million.
struct HostNames: Sendable {
    private var numbers: [String: UInt32] = [:]
    private var names: [String] = []

    /// The number of `host`, given it the first time it is seen.
    mutating func number(_ host: String) -> UInt32 {
        if let number = numbers[host] { return number }
        let number = UInt32(names.count)
        numbers[host] = number
        names.append(host)
        return number
    }

    /// The host given `number`.
    func name(_ number: UInt32) -> String { names[Int(number)] }
}
