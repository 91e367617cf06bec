"""The `million` workload of Benchmarks/run: a daemon holding a queue of --queue tasks (a
million by default) that wait: their URLs point at a loopback listener that accepts and
never answers, so four run for ever and the rest stay queued. Measured: the time of
`haul add -i` of the whole list (batches of 5,000), the daemon's RSS (total and anonymous)
once idle after the add, its peak during it, and after a restart's recovery, the recovery's time, and, best of three,
`haul list --limit 50`, `haul status`, `GET /v1/tasks?limit=50`, aria2's `tellWaiting 0 50`,
`tellWaiting -1 50`, `tellActive`, `tellStatus` of a GID, `getGlobalStat`, and the dashboard's first paint
(headless Chromium through Selenium, when both are here). No peer keeps a queue this long
to compare with: each figure is against its bar in issue 36.
"""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

SECRET = "million-benchmark"


def rss(pid):
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status") if ":" in line)
    kib = lambda name: int(fields.get(name, "0 kB").split()[0])
    return kib("VmRSS") / 1024, kib("RssAnon") / 1024


def peak_rss(pid):
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status") if ":" in line)
    return int(fields.get("VmHWM", "0 kB").split()[0]) / 1024


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def start_daemon(haul, env, port):
    subprocess.run([haul, "daemon", "-j", "4", "--listen", f"127.0.0.1:{port}", "--rpc-secret", SECRET],
                   env=env, check=True, capture_output=True)
    status = subprocess.run([haul, "status", "--json"], env=env, check=True, capture_output=True, text=True)
    return int(json.loads(status.stdout)["pid"])


def wait_idle(pid, limit=600):
    """Until the daemon's CPU stays still for two seconds (its recovery done); the time taken."""
    started, last = time.monotonic(), -1
    while time.monotonic() - started < limit:
        now = cpu_ticks(pid)
        if 0 <= now - last <= 5:
            break
        last = now
        time.sleep(2)
    return time.monotonic() - started - 2


def best_of_three(call):
    best = None
    for _ in range(3):
        started = time.monotonic()
        call()
        took = time.monotonic() - started
        best = took if best is None else min(best, took)
    return best * 1000


def probes(haul, env, port, home):
    token = open(os.path.join(home, "daemon.token")).read().strip()

    def http(path):
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Authorization": "Bearer " + token})
        return lambda: urllib.request.urlopen(request, timeout=60).read()

    def rpc(method, params):
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": ["token:" + SECRET] + params})
        request = urllib.request.Request(f"http://127.0.0.1:{port}/jsonrpc", data=body.encode(),
                                         headers={"Content-Type": "application/json"})
        return lambda: json.loads(urllib.request.urlopen(request, timeout=60).read())["result"]

    gid = rpc("aria2.tellWaiting", [0, 10, ["gid"]])()[0]["gid"]
    cli = lambda *args: lambda: subprocess.run([haul, *args], env=env, check=True, capture_output=True)
    return [
        ("haul list --limit 50", best_of_three(cli("list", "--limit", "50")), 100),
        ("haul status", best_of_three(cli("status")), None),
        ("GET /v1/tasks?limit=50", best_of_three(http("/v1/tasks?limit=50")), 100),
        ("aria2 tellWaiting 0 50", best_of_three(rpc("aria2.tellWaiting", [0, 50])), 100),
        ("aria2 tellWaiting -1 50", best_of_three(rpc("aria2.tellWaiting", [-1, 50])), None),
        ("aria2 tellActive", best_of_three(rpc("aria2.tellActive", [])), None),
        ("aria2 tellStatus GID", best_of_three(rpc("aria2.tellStatus", [gid, ["gid", "status"]])), None),
        ("aria2 getGlobalStat", best_of_three(rpc("aria2.getGlobalStat", [])), None),
    ]


def dashboard_paint(haul, env, root):
    """The dashboard's first paint in headless Chromium, in seconds; None without a browser."""
    python = os.path.join(root, ".build", "test-python", "bin", "python3")
    if not (os.path.exists(python) and os.path.exists("/usr/bin/chromium") and os.path.exists("/usr/bin/chromedriver")):
        return None
    link = subprocess.run([haul, "ui"], env=env, capture_output=True, text=True).stdout
    url = next((word for word in link.split() if word.startswith("http://")), None)
    script = (
        "import sys, time\n"
        f"sys.path.insert(0, {os.path.join(root, 'Tests', 'dashboard')!r})\n"
        "import browser\n"
        "from selenium.webdriver.support.ui import WebDriverWait\n"
        "driver = browser.chrome('/usr/bin/chromium', '/usr/bin/chromedriver')\n"
        "try:\n"
        "    started = time.monotonic()\n"
        "    driver.get(sys.argv[1])\n"
        "    WebDriverWait(driver, 120, poll_frequency=0.02).until(\n"
        "        lambda d: d.execute_script(\"return !document.getElementById('app').hidden\"))\n"
        "    print(time.monotonic() - started)\n"
        "finally:\n"
        "    driver.quit()\n"
    )
    result = subprocess.run([python, "-c", script, url], capture_output=True, text=True)
    return float(result.stdout.strip().splitlines()[-1]) if result.returncode == 0 else None


def million(args, ctx, root, free_port):
    haul, work = ctx["haul"], os.path.join(ctx["work"], "million")
    home = os.path.join(work, "home")
    env = dict(os.environ, HAUL_HOME=home)
    os.makedirs(work)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    urls = os.path.join(work, "urls.txt")
    with open(urls, "w") as f:
        for index in range(args.queue):
            f.write(f"http://127.0.0.1:{silent.getsockname()[1]}/q{index}\n")
    port = free_port()
    pid = start_daemon(haul, env, port)
    try:
        started = time.monotonic()
        subprocess.run([haul, "add", "-d", os.path.join(work, "out"), "-i", urls], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        added = time.monotonic() - started
        wait_idle(pid)  # What it keeps, once it has put the add's work away.
        after_add = rss(pid)
        peak = peak_rss(pid)
        subprocess.run([haul, "daemon", "stop"], env=env, check=True, capture_output=True)
        pid = start_daemon(haul, env, port)
        recovered = wait_idle(pid)
        after_recovery = rss(pid)
        rows = probes(haul, env, port, home)
        paint = dashboard_paint(haul, env, root)
    finally:
        subprocess.run([haul, "daemon", "stop"], env=env, capture_output=True)
        silent.close()
    print(f"\n{args.queue:,} queued tasks (a loopback listener that never answers; -j 4)\n")
    print("| what | Haul | bar |\n|---|---:|---:|")
    print(f"| `haul add -i` of {args.queue:,} | {added:.1f} s | 120 s |")
    print(f"| daemon RSS after the add (idle): total, anonymous | {after_add[0]:.0f}, {after_add[1]:.0f} MiB | 300 MiB |")
    print(f"| daemon peak RSS during the add | {peak:.0f} MiB | |")
    print(f"| a restart's recovery (until idle) | {recovered:.1f} s | |")
    print(f"| daemon RSS after recovery: total, anonymous | {after_recovery[0]:.0f}, {after_recovery[1]:.0f} MiB | 300 MiB |")
    for what, ms, bar in rows:
        print(f"| {what} (best of 3) | {ms:.0f} ms | {f'{bar} ms' if bar else ''} |")
    print(f"| dashboard's first paint | {'%.2f s' % paint if paint is not None else 'no browser here'} | 2 s |")
