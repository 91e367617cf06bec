// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "Haul",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Haul", targets: ["Haul"]),
        .library(name: "HaulWire", targets: ["HaulWire"]),
        .library(name: "HaulClient", targets: ["HaulClient"]),
        .library(name: "HaulDaemon", targets: ["HaulDaemon"]),
        .library(name: "HaulTesting", targets: ["HaulTesting"]),
        .executable(name: "haul", targets: ["haul"]),
    ],
    dependencies: [
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-async-algorithms", from: "1.1.4"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.8.1"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        .package(url: "https://github.com/LebJe/TOMLKit", from: "0.6.0"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // Tests only: reads and validates the daemon's OpenAPI document (the parser
        // swift-openapi-generator uses). Without its default trait, which loads external
        // references and builds notably slower.
        .package(url: "https://github.com/mattpolzin/OpenAPIKit", from: "6.4.0", traits: []),
    ],
    targets: [
        // Links SQLite itself for the one setting it sets (GRDB links the same library).
        .target(name: "CHaulSystem", linkerSettings: [.linkedLibrary("sqlite3")]),
        .target(
            name: "Haul",
            dependencies: [
                "CHaulSystem",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "AsyncAlgorithms", package: "swift-async-algorithms"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        // What the daemon and its clients say to each other: API bodies, event records, the
        // server-sent events format. Foundation only: no library, no server, no HTTP client.
        .target(name: "HaulWire"),
        // The library's types to the wire's and back (a request to the body that adds it, an
        // event to its record), with every field read back validated.
        .target(name: "HaulWireMapping", dependencies: ["Haul", "HaulWire"]),
        // A client of the daemon: links AsyncHTTPClient, never the web server.
        .target(
            name: "HaulClient",
            dependencies: [
                "Haul", "HaulWire", "HaulWireMapping",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
            ]
        ),
        // The daemon: its service, sessions and event log, and the HTTP API (Hummingbird).
        .target(
            name: "HaulDaemon",
            dependencies: [
                "Haul", "HaulWire", "HaulWireMapping",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "DequeModule", package: "swift-collections"),
            ],
            // The dashboard (HTML, CSS, JavaScript) and the OpenAPI document, embedded in the
            // binary by the EmbedAssets plugin.
            exclude: ["Assets"],
            plugins: ["EmbedAssets"]
        ),
        // Fleet mode: several daemons share one queue in PostgreSQL (leases with fencing).
        // Its own target, so that `haul get` and library users who never use it do not
        // link postgres-nio.
        .target(
            name: "HaulPostgres",
            dependencies: [
                "Haul", "HaulWire", "HaulWireMapping", "HaulDaemon",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                // Only to name the pool's errors (a database unreachable for a minute) in words.
                .product(name: "_ConnectionPoolModule", package: "postgres-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        // Writes a folder of files into a Swift source file (run by EmbedAssets at build time).
        .executableTarget(name: "haul-embed"),
        .plugin(name: "EmbedAssets", capability: .buildTool(), dependencies: ["haul-embed"]),
        .target(
            name: "HaulCLI",
            dependencies: [
                "Haul", "HaulWire", "HaulWireMapping", "HaulClient", "HaulDaemon", "HaulPostgres",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "TOMLKit", package: "TOMLKit"),
            ]
        ),
        // A release `haul` is linked by lld with its relative relocations packed (DT_RELR,
        // glibc 2.36) and no symbols exported to the dynamic table (nothing loads them): the
        // loader has a 4 MiB relocation table and 2 MiB of symbols less to read at each start,
        // 6 MiB less resident for every `haul` process (Benchmarks/run --workload memory). The
        // functions a download runs come first, together (symbol-order.txt, written by
        // scripts/symbol-order; names it lists that no longer exist are skipped), and the
        // compiler's private functions before them (layout.ld): the kernel maps code 64 KiB or
        // more at a time, so scattered they kept 10 MiB more of it resident.
        .executableTarget(
            name: "haul",
            dependencies: ["HaulCLI"],
            exclude: ["symbol-order.txt", "layout.ld", "link"],
            linkerSettings: [
                .unsafeFlags(
                    [
                        "-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs", "-Xlinker",
                        "--no-export-dynamic", "-Xlinker",
                        "--symbol-ordering-file=\(Context.packageDirectory)/Sources/haul/symbol-order.txt",
                        "-Xlinker", "--no-warn-symbol-ordering", "-Xlinker",
                        "--script=\(Context.packageDirectory)/Sources/haul/layout.ld",
                        // -lstdc++ finds Sources/haul/link/libstdc++.so first: a linker script
                        // naming the static libstdc++.a; and -lz finds libz.so there, zlib
                        // linked only as needed (none of its functions is called).
                        "-L", "\(Context.packageDirectory)/Sources/haul/link",
                    ],
                    .when(configuration: .release)
                )
            ]
        ),
        .target(
            name: "HaulTesting",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // What the test targets share: the servers they start (nginx, PostgreSQL, proxies),
        // haul processes, paths and tags. Built with the tests only (it imports Testing).
        // Bounds how many tests run at once in the test process (eight per core): a C
        // constructor sets Swift Testing's width before it starts (docs/testing.md).
        .target(name: "CHaulTestWidth", path: "Tests/CHaulTestWidth"),
        .target(
            name: "HaulTestSupport",
            dependencies: [
                "Haul", "HaulWire", "HaulWireMapping", "HaulClient", "HaulDaemon", "HaulTesting", "HaulPostgres",
                "CHaulTestWidth",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            path: "Tests/HaulTestSupport"
        ),
        // One test target per module, and one for what needs more than Haul (real servers,
        // PostgreSQL, browsers, Python clients, network namespaces): `swift test --filter
        // HaulTests` is the library's loop (CONTRIBUTING.md).
        .testTarget(
            name: "HaulTests",
            dependencies: [
                "Haul", "HaulTesting", "HaulTestSupport", "haul",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "HaulDaemonTests",
            dependencies: [
                "Haul", "HaulWire", "HaulWireMapping", "HaulClient", "HaulDaemon", "HaulTesting", "HaulTestSupport",
                "haul",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "OpenAPIKit", package: "OpenAPIKit"),
            ]
        ),
        .testTarget(
            name: "HaulCLITests",
            dependencies: [
                "Haul", "HaulWire", "HaulClient", "HaulCLI", "HaulDaemon", "HaulTesting", "HaulTestSupport", "haul",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        .testTarget(
            name: "HaulIntegrationTests",
            dependencies: [
                "Haul", "HaulWire", "HaulWireMapping", "HaulClient", "HaulCLI", "HaulDaemon", "HaulTesting",
                "HaulTestSupport", "HaulPostgres", "haul",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "OpenAPIKit", package: "OpenAPIKit"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
