"""The `memory` workload of Benchmarks/run: what each tool holds in memory, total and
anonymous, side by side on the same local nginx (issue 36's memory rows).

- 1 GiB (--size-mib) over one connection: haul -x 1, aria2c -x1, curl;
- the same over eight: haul -x 8, aria2c -x8 -s8;
- a 1 KiB file: haul, curl (and the wall time from start to exit, median of --runs; and again
  without GNU time or the sampler, whose 5 ms polls round a run this short, after a sync:
  the median of 60 or 20 × --runs runs, the two alternating; once in a new HAUL_HOME each
  run, as a user's first get, and once with the store in place, a new file each run, as
  every get after it);
- 200 files of 1 MiB (--files), 16 at once: haul -j16, aria2c -j16, curl --parallel;
- an idle daemon, two seconds after it first answers.

Peak total RSS is GNU time's (the kernel's ru_maxrss of the tool); peak anonymous
RSS is sampled from /proc every 5 ms (RssAnon: the heap, stacks and dirty copies; the rest is
the program's own pages and libraries, which the kernel may drop and read again). Every
output's SHA-256 is checked.
"""
import os
import shutil
import statistics
import subprocess
import sys
import time


def status_kib(pid, *names):
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status") if ":" in line)
    return [int(fields.get(name, "0 kB").split()[0]) for name in names]


def sampled(cmd, env, work):
    """Runs cmd under GNU time; returns wall seconds, peak total RSS MiB (GNU time's: a child
    forked from this Python process would count Python's pages) and peak anonymous RSS MiB
    (sampled from the tool, time's child)."""
    report, errors = os.path.join(work, "time.out"), os.path.join(work, "stderr.out")
    start = time.monotonic()
    # stderr to a file: a pipe nobody reads while the tool runs would stop a talkative one.
    with open(errors, "wb") as stderr:
        proc = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", report] + cmd, stdout=subprocess.DEVNULL,
                                stderr=stderr, env=env)
    peak_anon = 0
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
                for child in f.read().split():
                    peak_anon = max(peak_anon, status_kib(int(child), "RssAnon")[0])
        except (OSError, ValueError):
            pass
        time.sleep(0.005)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        with open(errors, errors="replace") as f:
            sys.exit(f"{cmd[0]} failed ({proc.returncode}): {f.read()[-500:]}")
    with open(report) as f:
        peak_total = int(f.read().split()[-1])
    return wall, peak_total / 1024, peak_anon / 1024


def row(label, results):
    walls = [r[0] for r in results]
    return (f"| {label} | {statistics.median(walls):.3f} | {max(r[1] for r in results):.1f} | "
            f"{max(r[2] for r in results):.1f} |")


def settle_binary(haul, env):
    """Drops the haul binary's pages from the page cache, then runs it three times: its pages
    cached as an installed program's are, only those runs read. A binary just built or copied
    has every page cached, and the kernel's fault-around then maps up to 16 cached pages
    around each one a run touches: 1.2 MiB more RSS and 2-3 ms more for a 1 KiB get, which a
    user's installed haul does not pay. The peers' libraries are the system's, cached as their
    runs left them."""
    fd = os.open(haul, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    for _ in range(3):
        subprocess.run([haul, "--version"], env=env, stdout=subprocess.DEVNULL, check=True)


def kept_store_walls(rounds, ctx, single_commands, fresh, sha256, unsampled):
    """Median start-to-exit times of a 1 KiB get into one HAUL_HOME kept across the runs, each
    run a new file (a new task in a store that has others, its log as the runs leave it), and
    of curl alternating with it; the store is made by one run before them, not counted."""
    url = f"http://127.0.0.1:{ctx['port']}/small.bin"
    digest = ctx["digests"]["small.bin"]
    shutil.rmtree(ctx["home"], ignore_errors=True)
    walls = {"haul": [], "curl": []}
    for index in range(rounds + 1):
        for tool in walls:
            fresh(ctx["out"])
            out = os.path.join(ctx["out"], f"small-{index}.bin")
            wall = unsampled(single_commands(tool, url, out, ctx["haul"]))
            if sha256(out) != digest:
                sys.exit(f"{tool}: SHA-256 mismatch for small.bin")
            if index > 0:
                walls[tool].append(wall)
    return {tool: statistics.median(values) for tool, values in walls.items()}


def memory(args, ctx, single_commands, many_commands, fresh, sha256):
    haul, env, port = ctx["haul"], ctx["env"], ctx["port"]
    settle_binary(haul, env)
    print(f"\nMemory: peak total RSS (GNU time) and peak anonymous RSS (sampled every 5 ms), "
          f"median wall of {args.runs}; the highest RSS of the runs; haul's binary dropped from "
          f"the page cache first, then run three times")
    print("| what | wall s | peak RSS MiB | peak anonymous MiB |")
    print("|---|---:|---:|---:|")

    def single(tools, name, digest, kept_home=False, runs=None, measure=None):
        """Each tool's runs (`runs`, else --runs), measured by `measure` (else sampled); with
        `kept_home`, haul's store stays in place between runs (made by one run before them, not
        counted), as for every run after a user's first."""
        url = f"http://127.0.0.1:{port}/{name}"
        out = os.path.join(ctx["out"], name)
        results = {tool: [] for tool in tools}
        if kept_home:
            fresh(ctx["out"])
            shutil.rmtree(ctx["home"], ignore_errors=True)
            for tool in tools:
                subprocess.run(single_commands(tool, url, out, haul), env=env, capture_output=True, check=True)
        for _ in range(runs or args.runs):
            for tool in tools:
                fresh(ctx["out"])
                if not kept_home:
                    shutil.rmtree(ctx["home"], ignore_errors=True)
                command = single_commands(tool, url, out, haul)
                results[tool].append(measure(command) if measure else sampled(command, env, ctx["work"]))
                if sha256(out) != digest:
                    sys.exit(f"{tool}: SHA-256 mismatch for {name}")
        return results

    def unsampled(cmd):
        """The wall time of cmd from start to exit, without GNU time or the sampler: a run of a
        few milliseconds is not rounded to the sampler's 5 ms polls."""
        start = time.perf_counter()
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, errors="replace")
        wall = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit(f"{cmd[0]} failed ({done.returncode}): {done.stderr[-500:]}")
        return wall

    big = single(["haul -x1", "aria2c -x1", "curl"], "big.bin", ctx["digests"]["big.bin"])
    for tool, results in big.items():
        print(row(f"{args.size_mib} MiB, one connection: {tool}", results), flush=True)
    eight = single(["haul -x8", "aria2c -x8"], "big.bin", ctx["digests"]["big.bin"])
    for tool, results in eight.items():
        print(row(f"{args.size_mib} MiB, eight connections: {tool}", results), flush=True)
    small = single(["haul", "curl"], "small.bin", ctx["digests"]["small.bin"])
    for tool, results in small.items():
        print(row(f"1 KiB: {tool}", results), flush=True)
    kept = single(["haul"], "small.bin", ctx["digests"]["small.bin"], kept_home=True)
    print(row("1 KiB, the store in place (every run after the first): haul", kept["haul"]), flush=True)
    # The 1 GiB files above written back first: a get syncs its file and its store, curl
    # syncs nothing, and neither should wait behind the benchmark's own earlier writes.
    os.sync()
    rounds = max(60, 20 * args.runs)
    timed = single(["haul", "curl"], "small.bin", ctx["digests"]["small.bin"], runs=rounds, measure=unsampled)
    medians = {tool: statistics.median(walls) for tool, walls in timed.items()}
    for tool, wall in medians.items():
        print(f"| 1 KiB, start to exit without the sampler (median of {rounds}): {tool} | {wall:.4f} | - | - |",
              flush=True)
    print(f"haul get / curl of 1 KiB, start to exit without the sampler: "
          f"{medians['haul'] / medians['curl']:.2f}x (issue 36's bar: 2x)", flush=True)
    kept_medians = kept_store_walls(rounds, ctx, single_commands, fresh, sha256, unsampled)
    for tool, wall in kept_medians.items():
        print(f"| 1 KiB, the store in place, a new file each run (median of {rounds}): {tool} | {wall:.4f} | - | - |",
              flush=True)
    print(f"haul get / curl of 1 KiB, the store in place (every get after a user's first): "
          f"{kept_medians['haul'] / kept_medians['curl']:.2f}x", flush=True)

    names = ctx["many"]
    urls = [f"http://127.0.0.1:{port}/many/{n}" for n in names]
    list_path = os.path.join(ctx["work"], "urls.txt")
    with open(list_path, "w") as f:
        f.write("\n".join(urls) + "\n")
    for tool in ["haul -j16", "aria2c -j16", "curl --parallel"]:
        results = []
        for _ in range(args.runs):
            fresh(ctx["out"])
            shutil.rmtree(ctx["home"], ignore_errors=True)
            results.append(sampled(many_commands(tool, urls, list_path, ctx["out"], haul), env, ctx["work"]))
            for n in names:
                if sha256(os.path.join(ctx["out"], n)) != ctx["digests"]["many/" + n]:
                    sys.exit(f"{tool}: SHA-256 mismatch for {n}")
        print(row(f"{len(names)} × 1 MiB, 16 at once: {tool}", results), flush=True)

    shutil.rmtree(ctx["home"], ignore_errors=True)
    daemon = subprocess.Popen([haul, "daemon", "--foreground"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while subprocess.run([haul, "status"], env=env, capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                sys.exit("the daemon did not answer within 60 s")
            time.sleep(0.1)
        time.sleep(2)
        total, anon = status_kib(daemon.pid, "VmRSS", "RssAnon")
        print(f"| an idle daemon (its RSS then, not a peak) | - | {total / 1024:.1f} | {anon / 1024:.1f} |", flush=True)
    finally:
        daemon.terminate()
        daemon.wait()
