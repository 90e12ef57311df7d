#!/usr/bin/env python3
"""Connections being set up all the time: for DURATION seconds, keep INFLIGHT
connections to an echo service going, each a fresh connection that sends one
random message, half-closes and reads the echo back. Every connection must
complete with the right echo; its set-up time (connect() returning) is kept.
Bounded: at most MAX connections, each at most TIMEOUT seconds.

Prints one JSON object: total, ok, failed (with the first reasons), connect
time median/max in ms, and how many set-ups took longer than 900 ms (a SYN
the client had to send again: Linux's first SYN retransmission is at 1 s).

Usage: connstorm.py --host H --port P [--duration 20] [--inflight 4]
                    [--timeout 20] [--max 20000] [--stop-file PATH]
                    [--http PATH --expect FILE]
--stop-file: start no new connection once PATH exists (DURATION stays the bound).
--http: each connection is an HTTP/1.0 GET of PATH instead (no half-close; the
server closes after its reply), which must be "200" with FILE's bytes as its body.
"""

import argparse
import json
import os
import selectors
import socket
import statistics
import sys
import time


class Conn:
    def __init__(self, host, port, now, request=None):
        self.http = request is not None
        self.msg = request if self.http else os.urandom(24).hex().encode() + b"\n"
        self.got = b""
        self.t0 = now
        self.connect_ms = None
        self.sent = False
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setblocking(False)
        self.sock.connect_ex((host, port))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--inflight", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--max", type=int, default=20000)
    ap.add_argument("--stop-file")
    ap.add_argument("--http", metavar="PATH")
    ap.add_argument("--expect", metavar="FILE")
    a = ap.parse_args()
    request = None
    if a.http is not None:
        if a.expect is None:
            ap.error("--http needs --expect")
        request = f"GET {a.http} HTTP/1.0\r\nHost: {a.host}\r\n\r\n".encode()
        with open(a.expect, "rb") as f:
            body = f.read()

    sel = selectors.DefaultSelector()
    start = time.monotonic()
    total = ok = 0
    failed = []
    connect_ms = []
    live = set()

    def finish(c, why=None):
        nonlocal ok
        sel.unregister(c.sock)
        c.sock.close()
        live.discard(c)
        if why is None:
            ok += 1
        else:
            failed.append(f"{why} (after {int((time.monotonic() - c.t0) * 1000)} ms)")

    while True:
        now = time.monotonic()
        stopped = a.stop_file is not None and os.path.exists(a.stop_file)
        starting = now - start < a.duration and total < a.max and not stopped
        while starting and len(live) < a.inflight:
            c = Conn(a.host, a.port, now, request)
            sel.register(c.sock, selectors.EVENT_WRITE, c)
            live.add(c)
            total += 1
            starting = total < a.max
        if not live:
            break
        for key, ev in sel.select(timeout=0.05):
            c = key.data
            if not c.sent:
                err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    finish(c, f"connect: {os.strerror(err)}")
                    continue
                c.connect_ms = (time.monotonic() - c.t0) * 1000
                connect_ms.append(c.connect_ms)
                c.sock.sendall(c.msg)  # < 100 bytes into an empty send buffer
                if not c.http:
                    c.sock.shutdown(socket.SHUT_WR)
                c.sent = True
                sel.modify(c.sock, selectors.EVENT_READ, c)
                continue
            try:
                b = c.sock.recv(4096)
            except OSError as e:
                finish(c, f"recv: {e}")
                continue
            if b:
                c.got += b
                if not c.http and len(c.got) > len(c.msg):
                    finish(c, "echo longer than the message")
            elif c.http:
                head, _, got = c.got.partition(b"\r\n\r\n")
                status = head.split(b"\r\n", 1)[0]
                if not status.startswith(b"HTTP/1.1 200") and not status.startswith(b"HTTP/1.0 200"):
                    finish(c, f"HTTP status {status[:40]!r}")
                elif got != body:
                    finish(c, f"body wrong: {len(got)} of {len(body)} bytes")
                else:
                    finish(c)
            elif c.got == c.msg:
                finish(c)
            else:
                finish(c, f"echo wrong: {len(c.got)} of {len(c.msg)} bytes")
        now = time.monotonic()
        for c in [c for c in live if now - c.t0 > a.timeout]:
            finish(c, "timed out" + (" in connect" if not c.sent else " waiting for the echo"))

    out = {
        "total": total,
        "ok": ok,
        "failed": len(failed),
        "failures": failed[:10],
        "connect_ms_median": round(statistics.median(connect_ms), 1) if connect_ms else None,
        "connect_ms_max": round(max(connect_ms), 1) if connect_ms else None,
        "connects_over_900ms": sum(1 for m in connect_ms if m > 900),
    }
    print(json.dumps(out))
    return 0 if failed == [] and ok == total and total > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
