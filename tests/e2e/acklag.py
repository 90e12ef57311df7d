#!/usr/bin/env python3
"""Round trip and cross-connection order of a Redis client whose writes wait in Nagle's buffer
(e2e scenario ack-log).

ROUNDS rounds (bounded also by SECONDS). In each, connection A (Nagle on: the kernel's default)
writes `INCR ack:n` and, in a second write right after, `SET ack:flag <round>`: the second write
waits in A's kernel until the first is acknowledged. GAP_MS later a second connection B asks
`GET ack:flag`. B's request was sent after A's SET was written, so a client expects to read the
round's flag; it reads the previous one when A's SET reached the service after B's GET, which is
what happens when A's acknowledgment is slow. Round trip: from A's first write to A's second reply.

Prints one JSON line: rounds, reordered (B read an older flag), errors, round-trip percentiles
(ms). Exit status 0 unless a reply was malformed or a connection failed.
"""
import argparse
import json
import socket
import sys
import time


def enc(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Conn:
    def __init__(self, host, port):
        self.s = socket.create_connection((host, port), timeout=10)
        self.buf = b""

    def line(self):
        while b"\r\n" not in self.buf:
            d = self.s.recv(65536)
            if not d:
                raise EOFError("connection closed")
            self.buf += d
        l, self.buf = self.buf.split(b"\r\n", 1)
        return l

    def reply(self):
        l = self.line()
        if l[:1] == b"$":
            n = int(l[1:])
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                d = self.s.recv(65536)
                if not d:
                    raise EOFError("connection closed")
                self.buf += d
            v, self.buf = self.buf[:n], self.buf[n + 2:]
            return v.decode()
        if l[:1] in (b"+", b":"):
            return l[1:].decode()
        raise ValueError(f"unexpected reply {l!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, default=6379)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--gap-ms", type=float, default=2.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    a = ap.parse_args()
    A, B = Conn(a.host, a.port), Conn(a.host, a.port)
    rtts, reordered, errors, first = [], 0, 0, []
    end = time.monotonic() + a.seconds
    rounds = 0
    try:
        for r in range(1, a.rounds + 1):
            if time.monotonic() > end:
                break
            t0 = time.monotonic()
            A.s.sendall(enc("INCR", "ack:n"))
            A.s.sendall(enc("SET", "ack:flag", r))
            time.sleep(a.gap_ms / 1000)
            B.s.sendall(enc("GET", "ack:flag"))
            got = B.reply()
            A.reply()
            if A.reply() != "OK":
                errors += 1
            rtts.append((time.monotonic() - t0) * 1000)
            if got != str(r):
                reordered += 1
                if len(first) < 5:
                    first.append({"round": r, "read": got})
            rounds = r
            # A quiet moment: each round starts with nothing in flight.
            time.sleep(0.005)
    except (OSError, EOFError, ValueError) as e:
        errors += 1
        first.append({"error": str(e)})
    rtts.sort()
    pct = lambda p: round(rtts[min(len(rtts) - 1, int(p * len(rtts)))], 2) if rtts else None
    print(json.dumps({"rounds": rounds, "reordered": reordered, "errors": errors, "first": first,
                      "rtt_ms": {"p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99),
                                 "max": round(rtts[-1], 2) if rtts else None}}))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
