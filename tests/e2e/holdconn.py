#!/usr/bin/env python3
"""Hold one echo connection through the VIP: connect, echo a line, write the local port to
--ready-file, wait until --release-file exists (at most --max seconds), echo another line.
Prints a JSON line: {"port": ..., "ok": true|false, "error": ...}. Exit 0 only if both echoes
came back whole on the same connection."""
import argparse
import json
import os
import socket
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--host", required=True)
p.add_argument("--port", type=int, required=True)
p.add_argument("--ready-file", required=True)
p.add_argument("--release-file", required=True)
p.add_argument("--max", type=float, default=30)
a = p.parse_args()


def echo(s, line: bytes) -> None:
    s.sendall(line)
    got = b""
    while len(got) < len(line):
        b = s.recv(len(line) - len(got))
        if not b:
            raise ConnectionError("connection closed")
        got += b
    if got != line:
        raise ValueError(f"echo differs: {got!r}")


out = {"port": None, "ok": False}
try:
    s = socket.create_connection((a.host, a.port), timeout=5)
    out["port"] = s.getsockname()[1]
    echo(s, b"first line\n")
    with open(a.ready_file, "w") as f:
        f.write(f"{out['port']}\n")
    deadline = time.monotonic() + a.max
    while not os.path.exists(a.release_file) and time.monotonic() < deadline:
        time.sleep(0.05)
    echo(s, b"second line\n")
    out["ok"] = True
except Exception as e:  # noqa: BLE001 - reported, not hidden
    out["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
sys.exit(0 if out["ok"] else 1)
