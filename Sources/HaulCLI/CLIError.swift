import Foundation
import Haul
import HaulWire

/// Messages for people on stderr: one line each.
enum CLIError {
    static func print(_ error: HaulError) {
        Output.error("haul: error: \(error.description)\n")
    }

    static func note(_ text: String) {
        Output.error("\(text)\n")
    }
}
