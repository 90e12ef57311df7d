#!/usr/bin/env python3
"""An echo client that resets its connection and connects again from the same source port.

Steps, each one waiting for the test's go-ahead file in --dir before it starts (and writing its own
file when done), so that the test can cut and heal a replica's link in between:
  1. connect from --sport, echo 100 bytes; write `quiet` (every replica holds all of it);
  2. after `cut`: echo 100 more bytes (the cut replica never gets them); write `sent`;
  3. after `healed`: reset the connection (SO_LINGER 0: a RST, no TIME-WAIT here); write `reset`;
  4. after `again`: connect from the same port, echo 3,000 bytes; write `open2` and hold the
     connection open until `done`, then close it.
Prints one JSON object (connect times, errors); exit status 0 only if every echo came back whole.
"""
import argparse
import json
import os
import socket
import struct
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="198.19.0.1")
    ap.add_argument("--port", type=int, default=7000)
    ap.add_argument("--sport", type=int, required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--step-timeout", type=float, default=30.0)
    args = ap.parse_args()
    out = {"errors": []}

    def wait(name):
        deadline = time.monotonic() + args.step_timeout
        path = os.path.join(args.dir, name)
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                raise TimeoutError("no go-ahead '%s' in %.0f s" % (name, args.step_timeout))
            time.sleep(0.02)

    def done(name):
        open(os.path.join(args.dir, name), "w").close()

    def connect():
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", args.sport))
        s.settimeout(10)
        t = time.monotonic()
        s.connect((args.host, args.port))
        return s, round((time.monotonic() - t) * 1000, 3)

    def echo(s, data):
        t = time.monotonic()
        s.sendall(data)
        got = b""
        while len(got) < len(data):
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("EOF after %d of %d echoed bytes" % (len(got), len(data)))
            got += chunk
        if got != data:
            raise ValueError("echo differs")
        return round((time.monotonic() - t) * 1000, 3)

    try:
        s, out["connect1_ms"] = connect()
        out["echo1_ms"] = echo(s, b"a" * 100)
        done("quiet")
        wait("cut")
        out["echo2_ms"] = echo(s, b"b" * 100)
        done("sent")
        wait("healed")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        done("reset")
        wait("again")
        s, out["connect2_ms"] = connect()
        out["echo3_ms"] = echo(s, b"c" * 3000)
        done("open2")
        wait("done")
        s.close()
    except (OSError, ValueError, TimeoutError) as e:
        out["errors"].append("%s: %s" % (type(e).__name__, e))
    print(json.dumps(out))
    sys.exit(1 if out["errors"] else 0)


if __name__ == "__main__":
    main()
