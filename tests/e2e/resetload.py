#!/usr/bin/env python3
"""Clients that reset their connection right after their reply (e2e scenario ack-log).

ROUNDS rounds: connect, SET ack:reset:<i> <i>, read the +OK, then close with SO_LINGER 0, so the
kernel sends a RST instead of a FIN. Every replica must apply every SET, also one whose copy of the
segment was lost on the way: the client will not send it again. Prints one JSON line (rounds,
errors, first errors); exit status 0 unless a round failed.
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
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=60.0)
    a = ap.parse_args()
    errors, first, done = 0, [], 0
    end = time.monotonic() + a.seconds
    for i in range(1, a.rounds + 1):
        if time.monotonic() > end:
            break
        try:
            s = socket.create_connection((a.host, a.port), timeout=10)
            k, v = f"ack:reset:{i}".encode(), str(i).encode()
            s.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v))
            got = b""
            while not got.endswith(b"\r\n"):
                d = s.recv(100)
                if not d:
                    raise EOFError("closed before the reply")
                got += d
            if got != b"+OK\r\n":
                raise ValueError(f"reply {got!r}")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
            done = i
        except (OSError, EOFError, ValueError) as e:
            errors += 1
            if len(first) < 5:
                first.append({"round": i, "error": str(e)})
        time.sleep(0.01)
    print(json.dumps({"rounds": done, "errors": errors, "first": first}))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
