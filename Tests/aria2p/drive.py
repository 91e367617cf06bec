"""Drives a Haul daemon with aria2p, a real aria2 client (https://pypi.org/project/aria2p/),
as its users would: its command line, then its Python API and its notifications.

    drive.py PORT SECRET FAST_URL SLOW_URL NOTIFY_URL

Prints one JSON object per line for the Swift test to check against what Haul did.
"""
import json
import subprocess
import sys
import threading
import time

import aria2p

port, secret, fast_url, slow_url, notify_url = sys.argv[1:6]
host = "http://127.0.0.1"


def report(**fields):
    print(json.dumps(fields), flush=True)


def cli(*args):
    result = subprocess.run(
        [sys.executable, "-m", "aria2p", "-H", host, "-p", port, "-s", secret, *args],
        capture_output=True, text=True, timeout=120,
    )
    return result.returncode, result.stdout.strip(), result.stderr.strip()


def wait(condition, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


api = aria2p.API(aria2p.Client(host=host, port=int(port), secret=secret))

# The command line: add, then show what the daemon has.
code, out, err = cli("add", fast_url)
report(step="cli add", code=code, out=out, err=err)
fast = None
wait(lambda: any(d.is_complete for d in api.get_downloads()))
for download in api.get_downloads():
    if download.files and download.files[0].uris and download.files[0].uris[0]["uri"] == fast_url:
        fast = download
code, out, err = cli("show")
report(step="cli show", code=code, out=out, gid=fast.gid if fast else None)

# The Python API: add, pause, resume, then remove a slow download.
slow = api.add_uris([slow_url])
report(step="add_uris", gid=slow.gid)
wait(lambda: api.get_download(slow.gid).is_active)
code, out, err = cli("pause", slow.gid)
report(step="cli pause", code=code, err=err)
paused = wait(lambda: api.get_download(slow.gid).is_paused)
report(step="paused", ok=paused, status=api.get_download(slow.gid).status)
code, out, err = cli("resume", slow.gid)
report(step="cli resume", code=code, err=err)
resumed = wait(lambda: api.get_download(slow.gid).status in ("active", "waiting"))
report(step="resumed", ok=resumed, status=api.get_download(slow.gid).status)
# aria2p removes the download, then its result: it is gone from the list, or listed removed.
api.remove([api.get_download(slow.gid)])
removed = wait(lambda: all(d.gid != slow.gid or d.status == "removed" for d in api.get_downloads()))
report(step="removed", ok=removed)

# Notifications over WebSocket: a download's completion arrives as onDownloadComplete.
completed = []
paused_heard = []
api.listen_to_notifications(
    threaded=True,
    on_download_complete=lambda api_, gid: completed.append(gid),
    on_download_pause=lambda api_, gid: paused_heard.append(gid),
    timeout=1,
)
# The listener is a thread that keeps Python running until it is stopped: stopped whatever
# happens below, so a failed step ends the script with its traceback instead of hanging it.
try:
    # aria2p connects in its thread and says nothing when it listens: pause a slow probe download
    # again and again until its pause is heard, then the listener is certainly connected.
    probe = api.add_uris([slow_url], options={"pause": "true"})
    listening = False
    deadline = time.monotonic() + 60
    while not listening and time.monotonic() < deadline:
        api.client.unpause(probe.gid)
        wait(lambda: api.get_download(probe.gid).status != "paused", 5)
        api.client.pause(probe.gid)
        listening = wait(lambda: probe.gid in paused_heard, 1)
    report(step="listening", ok=listening)
    api.client.remove(probe.gid)
    notify = api.add_uris([notify_url])
    heard = wait(lambda: notify.gid in completed)
    report(step="notification", gid=notify.gid, heard=heard, completed=completed)
finally:
    api.stop_listening()

# Purge: the finished and removed downloads leave the list.
code, out, err = cli("purge")
report(step="cli purge", code=code, err=err)
report(step="after purge", gids=[d.gid for d in api.get_downloads()])
