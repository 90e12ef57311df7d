#!/usr/bin/env python3
"""Keep checking that a service answers: every --every seconds a fresh TCP connection to
HOST:PORT, one line echoed back, closed. Stops when --stop-file exists or after --max seconds.
Prints a JSON summary; exit 0 only if every probe succeeded and there were at least --min."""
import argparse
import json
import os
import socket
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--host", required=True)
p.add_argument("--port", type=int, required=True)
p.add_argument("--stop-file", required=True)
p.add_argument("--ready-file", required=True)
p.add_argument("--every", type=float, default=0.1)
p.add_argument("--max", type=float, default=50)
p.add_argument("--min", type=int, default=10)
a = p.parse_args()

ok = fail = 0
failures = []
t0 = time.monotonic()
while not os.path.exists(a.stop_file) and time.monotonic() - t0 < a.max:
    line = f"probe {ok + fail}\n".encode()
    try:
        with socket.create_connection((a.host, a.port), timeout=1) as s:
            s.settimeout(1)
            s.sendall(line)
            got = b""
            while len(got) < len(line):
                b = s.recv(100)
                if not b:
                    break
                got += b
        if got != line:
            raise ValueError(f"echo {got!r}")
        ok += 1
        if ok == 3:
            open(a.ready_file, "w").close()
    except Exception as e:  # noqa: BLE001 - counted and reported
        fail += 1
        if len(failures) < 10:
            failures.append(f"{time.strftime('%H:%M:%S')} {type(e).__name__}: {e}")
    time.sleep(a.every)
print(json.dumps({"ok": ok, "fail": fail, "failures": failures}))
sys.exit(0 if fail == 0 and ok >= a.min else 1)
