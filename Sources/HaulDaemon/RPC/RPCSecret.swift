import Haul

/// The one check every source of aria2's RPC secret goes through (`--rpc-secret`,
/// `HAUL_RPC_SECRET`, ``DaemonService/Configuration/rpcSecret``): a web page of any site may
/// post to `/jsonrpc` without a preflight, so the secret is all that stands between it and
/// the daemon.
public enum RPCSecret {
    /// The fewest characters a secret may have.
    public static let minimumLength = 8
    /// The most: a secret travels in every call.
    public static let maximumLength = 1024

    /// The secret `value` from `source` (how the user gave it, e.g. `--rpc-secret` or
    /// `HAUL_RPC_SECRET`): nil when it is unset or empty (the daemon then uses its token).
    /// - Throws: ``HaulError/Code/invalidArgument`` naming `source` when the secret is too
    ///   short or too long, or holds control characters or spaces at either end.
    public static func checked(_ value: String?, from source: String) throws -> String? {
        guard let value, !value.isEmpty else { return nil }
        let count = value.count
        guard count >= minimumLength, count <= maximumLength,
            !value.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }),
            value.first?.isWhitespace == false, value.last?.isWhitespace == false
        else {
            throw HaulError(
                .invalidArgument,
                "\(source) must be \(minimumLength) to \(maximumLength) characters, without control characters or spaces at either end (\(count) given)",
                hint: "Choose a longer secret, or leave \(source) unset to use the token in daemon.token"
            )
        }
        return value
    }
}
