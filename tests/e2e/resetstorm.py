#!/usr/bin/env python3
"""Clients that reset their connections at once (e2e scenario client-reset).

ROUNDS rounds, each one of, in turn:
  * connect, write SET storm:<i> <i>, and reset the connection (SO_LINGER 0) without reading the
    reply: the RST follows the request by microseconds;
  * connect and reset at once, writing nothing (what a TCP health check such as HAProxy's does);
  * with --reuse, every third round instead: connect from a fixed port, write SET storm:<i>,
    reset, connect again at once from the same port, write SET storm:<i>:again, read the reply,
    and reset that one too. The first connection's SET is followed by a script that keeps every
    server busy for tens of milliseconds. A replica's server may not have read the first reset when the second
    connection's accept event reaches its shim: the two connections share their key there.
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


# A script that keeps Redis busy for some tens of milliseconds (deterministic: every replica
# runs it at the same point of its input).
_LOOP = b"local i=0 while i<4000000 do i=i+1 end return i"
BUSY = b"*3\r\n$4\r\nEVAL\r\n$%d\r\n%s\r\n$1\r\n0\r\n" % (len(_LOOP), _LOOP)


def set_cmd(k, v):
    return b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, default=6379)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--reuse", action="store_true", help="every third round reuses its port at once")
    a = ap.parse_args()
    errors, first, done, sets = 0, [], 0, 0
    end = time.monotonic() + a.seconds
    linger = struct.pack("ii", 1, 0)
    for i in range(1, a.rounds + 1):
        if time.monotonic() > end:
            break
        try:
            if a.reuse and i % 3 == 0:
                # A fixed port per round (below the ephemeral range), reused at once.
                port = 20000 + i % 10000
                for again in (b"", b":again"):
                    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                    s.settimeout(10)
                    s.bind(("0.0.0.0", port))
                    s.connect((a.host, a.port))
                    cmd = set_cmd(f"storm:{i}".encode() + again, str(i).encode())
                    if not again:
                        # One write, one chunk: every server applies the SET, then runs a
                        # script that keeps it busy (replicated input, no write), so the reset
                        # and the next connection's accept reach each replica before its
                        # server has read the reset.
                        cmd += BUSY
                    s.sendall(cmd)
                    sets += 1
                    if again:
                        reply = s.recv(64)
                        if reply != b"+OK\r\n":
                            raise OSError(f"reply {reply!r} on a reused port")
                    s.close()
                done = i
                time.sleep(0.005)
                continue
            s = socket.create_connection((a.host, a.port), timeout=10)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            if i % 2:
                s.sendall(set_cmd(f"storm:{i}".encode(), str(i).encode()))
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
