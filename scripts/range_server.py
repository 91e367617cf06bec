#!/usr/bin/env python3
"""A small HTTP/1.1 file server with Range, If-Range and ETag support and an optional
per-connection rate limit, for trying Haul on a machine with no internet and no nginx.

    python3 scripts/range_server.py --directory DIR [--port 0] [--rate BYTES_PER_SEC] [--log FILE]
                                    [--hold-after BYTES --release FILE]

With --hold-after, once that many body bytes have been sent (all responses together) every
response stops sending until FILE exists: a client cannot finish before the caller is done
with it, however fast the machine.

Prints the port it listens on (127.0.0.1 only) as its first line of output.
"""
import argparse
import email.utils
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def make_handler(root, rate, log_path, hold_after=None, release=None):
    sent_total = [0]
    lock = threading.Lock()

    def wait_if_held(count):
        """Counts `count` bytes sent; past --hold-after, waits until the release file exists."""
        if hold_after is None:
            return
        with lock:
            sent_total[0] += count
            held = sent_total[0] >= hold_after
        while held and not os.path.exists(release):
            time.sleep(0.02)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            if log_path:
                with open(log_path, "a") as log:
                    log.write("%s\n" % (fmt % args))

        def log_request(self, code="-", size="-"):
            pass  # Logged by serve() with the Range and If-Range headers instead.

        def do_HEAD(self):
            self.serve(head=True)

        def do_GET(self):
            self.serve(head=False)

        def serve(self, head):
            path = os.path.normpath(os.path.join(root, self.path.split("?")[0].lstrip("/")))
            if not path.startswith(os.path.abspath(root)) or not os.path.isfile(path):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            info = os.stat(path)
            size = info.st_size
            etag = '"%x-%x"' % (int(info.st_mtime), size)
            last_modified = email.utils.formatdate(info.st_mtime, usegmt=True)
            start, end, status = 0, size - 1, 200
            requested = self.headers.get("Range")
            if_range = self.headers.get("If-Range")
            match = re.fullmatch(r"bytes=(\d+)-(\d*)", requested or "")
            if match and (if_range is None or if_range in (etag, last_modified)):
                start = int(match.group(1))
                if start >= size:
                    self.send_response(416)
                    self.send_header("Content-Range", "bytes */%d" % size)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    self.log_message("range=%s if-range=%s -> 416", requested, if_range)
                    return
                if match.group(2):
                    end = min(int(match.group(2)), size - 1)
                status = 206
            self.send_response(status)
            self.send_header("Content-Length", str(end - start + 1))
            self.send_header("ETag", etag)
            self.send_header("Last-Modified", last_modified)
            self.send_header("Accept-Ranges", "bytes")
            if status == 206:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
            self.end_headers()
            self.log_message("range=%s if-range=%s -> %d", requested, if_range, status)
            if head:
                return
            with open(path, "rb") as f:
                f.seek(start)
                left = end - start + 1
                began = time.monotonic()
                sent = 0
                while left > 0:
                    chunk = f.read(min(left, 64 * 1024))
                    if not chunk:
                        break
                    try:
                        self.wfile.write(chunk)
                    except (BrokenPipeError, ConnectionResetError):
                        return
                    left -= len(chunk)
                    sent += len(chunk)
                    wait_if_held(len(chunk))
                    if rate:
                        delay = sent / rate - (time.monotonic() - began)
                        if delay > 0:
                            time.sleep(delay)

    return Handler


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--directory", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--rate", type=int, default=0, help="bytes per second per connection")
    parser.add_argument("--log")
    parser.add_argument("--hold-after", type=int, help="stop sending after this many body bytes until --release exists")
    parser.add_argument("--release", help="the file whose existence ends the hold")
    args = parser.parse_args()
    if (args.hold_after is None) != (args.release is None):
        parser.error("--hold-after and --release go together")
    handler = make_handler(os.path.abspath(args.directory), args.rate, args.log, args.hold_after, args.release)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
