import Foundation
import Haul

/// Messages for people on stderr: one line each.
enum CLIError {
    static func print(_ error: HaulError) {
        FileHandle.standardError.write(Data("haul: error: \(error.description)\n".utf8))
    }

    static func note(_ text: String) {
        FileHandle.standardError.write(Data("\(text)\n".utf8))
    }
}
