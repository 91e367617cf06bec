import Foundation
import PackagePlugin

/// Embeds the files of a target's `Assets` folder in the target, through `haul-embed`: the
/// daemon's web dashboard and its OpenAPI document ship inside the binary.
@main
struct EmbedAssets: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: any Target) async throws -> [Command] {
        let folder = target.directoryURL.appending(path: "Assets")
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path(percentEncoded: false))
            .filter { !$0.hasPrefix(".") }
            .sorted()
        let inputs = names.map { folder.appending(path: $0) }
        let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedAssets+Files.swift")
        return [
            .buildCommand(
                displayName: "Embedding \(names.count) assets in \(target.name)",
                executable: try context.tool(named: "haul-embed").url,
                arguments: [output.path(percentEncoded: false)] + inputs.map { $0.path(percentEncoded: false) },
                inputFiles: inputs,
                outputFiles: [output]
            )
        ]
    }
}
