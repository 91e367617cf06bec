import Foundation
import Haul
import HaulWire
import HaulWireMapping
import Synchronization

/// Messages for people on stderr: one line each.
enum CLIError {
    /// The configuration file and the options it added to this command line, so an error
    /// about one of them (found only when the command runs) names the file.
    static let fileDefaults = Mutex<(path: String, options: Set<String>)?>(nil)

    static func print(_ error: HaulError) {
        var line = error.description
        if let (path, options) = fileDefaults.withLock({ $0 }),
            options.contains(where: { line.hasPrefix($0 + " ") || line.hasPrefix($0 + ":") })
        {
            line = "in \(path): " + line
        }
        Output.error("haul: error: \(line)\n")
    }

    static func note(_ text: String) {
        Output.error("\(text)\n")
    }
}
