#!/usr/bin/env python3
"""Clients that reset their connections at once (e2e scenario client-reset).

ROUNDS rounds, each one of, in turn:
  * connect, write SET storm:<i> <i>, and reset the connection (SO_LINGER 0) without reading the
    reply: the RST follows the request by microseconds;
  * connect and reset at once, writing nothing (what a TCP health check such as HAProxy's does).
Every connection is reset before a replica's server has taken it from the kernel's accept queue
in many rounds, so a replica must still know which connection it is (its place in the input
order). Prints one JSON line (rounds, sets, errors, first errors); exit status 0 unless a
connect failed.
"""
import argparse
import json
import socket
import struct
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, default=6379)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=60.0)
    a = ap.parse_args()
    errors, first, done, sets = 0, [], 0, 0
    end = time.monotonic() + a.seconds
    linger = struct.pack("ii", 1, 0)
    for i in range(1, a.rounds + 1):
        if time.monotonic() > end:
            break
        try:
            s = socket.create_connection((a.host, a.port), timeout=10)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            if i % 2:
                k, v = f"storm:{i}".encode(), str(i).encode()
                s.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v))
                sets += 1
            s.close()
            done = i
        except OSError as e:
            errors += 1
            if len(first) < 5:
                first.append({"round": i, "error": str(e)})
        time.sleep(0.005)
    print(json.dumps({"rounds": done, "sets": sets, "errors": errors, "first": first}))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
