import Foundation

/// Who the download says it is to the server, with curl's rules.
///
/// A user and password (curl's `-u`, or `user:password@` in the URL, which wins) are sent
/// with HTTP Basic to the URL's own host only: never to another host a redirect leads to.
/// A netrc file (curl's `--netrc-file`) gives credentials per host, for any host of the
/// chain that it names. An `Authorization` header given with the request is sent as it is
/// instead, to the first host only.
public struct Credentials: Sendable, Hashable, Codable {
    /// The user name for the URL's host.
    public var user: String?
    /// The password for the URL's host.
    public var password: String?
    /// A netrc file to look each host up in (read whenever the download starts).
    public var netrcFile: String?

    public init(user: String? = nil, password: String? = nil, netrcFile: String? = nil) {
        self.user = user
        self.password = password
        self.netrcFile = netrcFile
    }

    private enum CodingKeys: String, CodingKey {
        case user, password, netrcFile
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        user = try container.decodeIfPresent(String.self, forKey: .user)
        password = try container.decodeIfPresent(String.self, forKey: .password)
        netrcFile = try container.decodeIfPresent(String.self, forKey: .netrcFile)
    }

    /// None: only what the URL itself carries.
    public static let none = Credentials()

    /// Parses curl's `-u user[:password]` (the first `:` separates them).
    public init(userAndPassword text: String) {
        if let colon = text.firstIndex(of: ":") {
            self.init(user: String(text[..<colon]), password: String(text[text.index(after: colon)...]))
        } else {
            self.init(user: text, password: "")
        }
    }

    /// `$NETRC`, else `~/.netrc`, as curl looks for it.
    public static func defaultNetrcFile(_ environment: [String: String] = ProcessInfo.processInfo.environment) -> String
    {
        if let file = environment["NETRC"], !file.isEmpty { return Destination.absolute(file) }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return (home as NSString).appendingPathComponent(".netrc")
    }

    /// Checks lengths and characters, and that a netrc path is absolute.
    /// - Throws: ``HaulError/Code/invalidArgument`` naming the field, never its value.
    func validate() throws {
        for (what, value) in [("user name", user), ("password", password)] {
            guard let value else { continue }
            guard value.utf8.count <= 1024, !value.unicodeScalars.contains(where: { $0.value < 0x20 || $0 == "\u{7F}" })
            else {
                throw HaulError(.invalidArgument, "The \(what) holds a control character or more than 1024 bytes")
            }
        }
        if let netrcFile {
            guard netrcFile.hasPrefix("/"), netrcFile.utf8.count <= TLSOptions.maxPathLength,
                !netrcFile.utf8.contains(0)
            else {
                throw HaulError(.invalidArgument, "The netrc file must be an absolute path without NUL")
            }
        }
    }

    /// The `Authorization` value for `user` and `password`.
    static func basic(user: String, password: String) -> String {
        "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
    }
}

/// A netrc file: `machine HOST login USER password SECRET` entries and a `default`, as
/// curl and ftp read them (`macdef` bodies skipped, `"quoted"` tokens allowed).
struct Netrc: Sendable {
    struct Entry: Sendable, Equatable {
        var login: String?
        var password: String?
    }

    private(set) var machines: [(host: String, entry: Entry)] = []
    private(set) var fallback: Entry?

    /// The largest netrc file read.
    static let maxSize = 1 << 20

    init(parsing text: String) {
        var tokens = Netrc.tokens(text)[...]
        var current: Entry?
        var currentHost: String?
        func close() {
            guard let entry = current else { return }
            if let host = currentHost {
                machines.append((host, entry))
            } else if fallback == nil {
                fallback = entry
            }
            current = nil
            currentHost = nil
        }
        while let token = tokens.popFirst() {
            switch token {
            case "machine":
                close()
                guard let host = tokens.popFirst() else { return }
                currentHost = host.lowercased()
                current = Entry()
            case "default":
                close()
                current = Entry()
            case "login":
                current?.login = tokens.popFirst()
            case "password":
                current?.password = tokens.popFirst()
            case "account":
                _ = tokens.popFirst()
            case "macdef":
                close()
                // Its body runs to the next empty line: tokens() marks that with "\n\n".
                _ = tokens.popFirst()
                while let next = tokens.popFirst(), next != "\n\n" {}
            case "\n\n":
                continue
            default:
                continue
            }
        }
        close()
    }

    /// Reads `path`.
    /// - Throws: ``HaulError/Code/invalidArgument`` when it cannot be read or is too large.
    init(file path: String) throws {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw HaulError(
                .invalidArgument,
                "The netrc file \(path) cannot be read",
                path: path,
                hint: "Check the path and its permissions"
            )
        }
        guard data.count <= Netrc.maxSize else {
            throw HaulError(.invalidArgument, "The netrc file \(path) is larger than 1 MiB", path: path)
        }
        self.init(parsing: String(decoding: data, as: UTF8.self))
    }

    /// The entry for `host`: its `machine`, else the `default`.
    func entry(for host: String) -> Entry? {
        let host = host.lowercased()
        return machines.first { $0.host == host }?.entry ?? fallback
    }

    /// Whitespace-separated tokens; `"…"` quotes one with `\"` and `\\` escapes; an empty
    /// line becomes the token "\n\n" (the end of a macdef).
    static func tokens(_ text: String) -> [String] {
        var tokens: [String] = []
        var current = ""
        var quoted = false
        var escaped = false
        var newlines = 0
        func flush() {
            if !current.isEmpty { tokens.append(current) }
            current = ""
        }
        for character in text {
            if quoted {
                if escaped {
                    current.append(character)
                    escaped = false
                } else if character == "\\" {
                    escaped = true
                } else if character == "\"" {
                    quoted = false
                    tokens.append(current)
                    current = ""
                } else {
                    current.append(character)
                }
                continue
            }
            if character == "\n" || character == "\r\n" {
                flush()
                newlines += 1
                if newlines == 2 { tokens.append("\n\n") }
                continue
            }
            if character.isWhitespace {
                flush()
                continue
            }
            newlines = 0
            if character == "\"" && current.isEmpty {
                quoted = true
            } else {
                current.append(character)
            }
        }
        flush()
        return tokens
    }
}
