import HaulCLI

/// The `haul` executable: everything is in HaulCLI.
@main
enum HaulMain {
    static func main() async {
        await HaulCommand.runMain()
    }
}
