#!/usr/bin/env python3
"""One Redis connection that checks every reply is well-formed RESP.

Modes (--mode):
  info   ROUNDS times: INFO, TIME and PING, pipelined in one write; the INFO reply must be one
         bulk string whose length matches, TIME's two bulk strings of digits, PING's exactly
         +PONG. (TIME's microseconds have no leading zeros: its length differs between replicas
         about one reply in five.)
  docs   COMMAND DOCS then PING once (what interactive redis-cli sends first).
  incr   ROUNDS times: INCR KEY, each reply the integer one above the last (a deterministic reply
         the replicas agree on), paced by --gap-ms.
Prints one JSON object: rounds done, the first malformed round (or null) and why, whether the
connection ended (reset or closed) and after how many rounds, and the INFO lengths seen.
Bounded: --seconds overall, a 5 s read timeout.
"""
import argparse
import json
import socket
import sys
import time


class Malformed(Exception):
    pass


class Reader:
    def __init__(self, sock):
        self.s = sock
        self.buf = b""

    def _fill(self):
        d = self.s.recv(65536)
        if not d:
            raise ConnectionError("closed by the server")
        self.buf += d

    def line(self):
        while b"\r\n" not in self.buf:
            if len(self.buf) > 1 << 20:
                raise Malformed("no CRLF in 1 MiB")
            self._fill()
        i = self.buf.index(b"\r\n")
        l, self.buf = self.buf[:i], self.buf[i + 2:]
        return l

    def exact(self, n):
        while len(self.buf) < n:
            self._fill()
        d, self.buf = self.buf[:n], self.buf[n:]
        return d

    def reply(self, depth=0):
        if depth > 16:
            raise Malformed("nested too deep")
        l = self.line()
        if not l:
            raise Malformed("empty line")
        t, rest = l[:1], l[1:]
        if t in (b"+", b"-"):
            return l.decode("latin1")
        if t == b":":
            try:
                return int(rest)
            except ValueError:
                raise Malformed("bad integer %r" % rest[:40])
        if t in (b"$", b"*"):
            try:
                n = int(rest)
            except ValueError:
                raise Malformed("bad length %r" % rest[:40])
            if n < 0:
                return None
            if t == b"$":
                if n > 64 << 20:
                    raise Malformed("bulk length %d" % n)
                d = self.exact(n + 2)
                if d[-2:] != b"\r\n":
                    raise Malformed("bulk of %d bytes not followed by CRLF" % n)
                return d[:-2]
            if n > 1 << 20:
                raise Malformed("array length %d" % n)
            return [self.reply(depth + 1) for _ in range(n)]
        raise Malformed("unknown type byte %r" % t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, default=6379)
    ap.add_argument("--mode", choices=["info", "docs", "incr"], default="info")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--key", default="respcheck")
    ap.add_argument("--gap-ms", type=float, default=0)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--ready", help="touch this file once connected")
    a = ap.parse_args()
    out = {"mode": a.mode, "rounds": 0, "malformed_at": None, "why": None,
           "ended_at": None, "end": None, "info_lengths": []}
    s = socket.create_connection((a.host, a.port), timeout=5)
    s.settimeout(5)
    r = Reader(s)
    if a.ready:
        open(a.ready, "w").close()
    deadline = time.monotonic() + a.seconds
    last = None
    try:
        for k in range(1 if a.mode == "docs" else a.rounds):
            if time.monotonic() > deadline:
                break
            if a.mode == "info":
                s.sendall(b"INFO\r\nTIME\r\nPING\r\n")
                info = r.reply()
                if not isinstance(info, bytes) or b"redis_version:" not in info:
                    raise Malformed("INFO reply is not the server's INFO: %r" % (str(info)[:80],))
                out["info_lengths"].append(len(info))
                tm = r.reply()
                if not (isinstance(tm, list) and len(tm) == 2
                        and all(isinstance(x, bytes) and x.isdigit() for x in tm)):
                    raise Malformed("TIME answered %r" % (str(tm)[:80],))
                p = r.reply()
                if p != "+PONG":
                    raise Malformed("PING answered %r" % (str(p)[:80],))
            elif a.mode == "docs":
                s.sendall(b"COMMAND DOCS\r\nPING\r\n")
                docs = r.reply()
                if not isinstance(docs, list) or len(docs) < 100:
                    raise Malformed("COMMAND DOCS reply is not a long array: %r" % (str(docs)[:80],))
                p = r.reply()
                if p != "+PONG":
                    raise Malformed("PING answered %r" % (str(p)[:80],))
            else:
                s.sendall(b"INCR " + a.key.encode() + b"\r\n")
                v = r.reply()
                if not isinstance(v, int) or (last is not None and v != last + 1):
                    raise Malformed("INCR answered %r after %r" % (v, last))
                last = v
                if a.gap_ms:
                    time.sleep(a.gap_ms / 1000)
            out["rounds"] = k + 1
    except Malformed as e:
        out["malformed_at"] = out["rounds"] + 1
        out["why"] = str(e)
    except (ConnectionError, OSError) as e:
        out["ended_at"] = out["rounds"]
        out["end"] = type(e).__name__ + ": " + str(e)
    finally:
        s.close()
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
