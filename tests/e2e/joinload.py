#!/usr/bin/env python3
"""Writers for the join scenario: CONNS long-lived connections, each a loop
of INCR ctr:<i>, APPEND log:<i> <n>, LPUSH list:<i> <n> (one command at a
time, each reply checked), plus a new short connection every SHORT_MS
(INCR short, then close; none with --short-ms 0), for DURATION seconds. Then, on one more
connection, every counter is read back: it must equal the number of INCRs
that connection saw acknowledged (exact counters: nothing lost, nothing
applied twice), and so must every list's length.

Prints one JSON line: commands, errors, short connections (ok / failed),
the largest stall one command saw (ms), counters checked and wrong, and the
commands completed per 100 ms (`rate`: wall-clock start in ms, counts), for
the throughput during a join against the rest of the same run.
Exit status 0 only with no error and every counter exact.
"""
import argparse
import json
import socket
import sys
import threading
import time


def cmd(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, host, port, timeout):
        self.s = socket.create_connection((host, port), timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def line(self):
        while b"\r\n" not in self.buf:
            d = self.s.recv(65536)
            if not d:
                raise ConnectionError("connection closed by the server")
            self.buf += d
        i = self.buf.index(b"\r\n")
        ln, self.buf = self.buf[:i], self.buf[i + 2:]
        return ln

    def reply(self):
        ln = self.line()
        t = ln[:1]
        if t == b"-":
            raise RuntimeError(ln.decode(errors="replace"))
        if t in (b"+", b":"):
            return ln[1:]
        if t == b"$":
            n = int(ln[1:])
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                d = self.s.recv(65536)
                if not d:
                    raise ConnectionError("connection closed by the server")
                self.buf += d
            v, self.buf = self.buf[:n], self.buf[n + 2:]
            return v
        raise RuntimeError("unexpected reply %r" % ln)

    def call(self, *args):
        self.s.sendall(cmd(*args))
        return self.reply()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, default=6379)
    ap.add_argument("--conns", type=int, default=20)
    ap.add_argument("--duration", type=float, default=12.0)
    ap.add_argument("--short-ms", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--max", type=int, default=200000, help="commands per connection at most")
    a = ap.parse_args()

    errors = []
    incrs = [0] * a.conns
    commands = [0] * a.conns
    stall = [0.0] * a.conns
    short = {"ok": 0, "failed": 0}
    stop = time.monotonic() + a.duration
    lock = threading.Lock()
    start_wall = time.time()
    start_mono = time.monotonic()
    buckets = [0] * (int(a.duration * 10) + 20)

    def done(k):
        b = int((time.monotonic() - start_mono) * 10)
        if 0 <= b < len(buckets):
            buckets[b] += k  # a lost update under the GIL race is one bucket off by a few

    def writer(i):
        try:
            c = Conn(a.host, a.port, a.timeout)
            n = 0
            while time.monotonic() < stop and n < a.max:
                t0 = time.monotonic()
                v = int(c.call("INCR", "ctr:%d" % i))
                if v != incrs[i] + 1:
                    raise RuntimeError("INCR ctr:%d gave %d after %d" % (i, v, incrs[i]))
                incrs[i] = v
                c.call("APPEND", "log:%d" % i, "%d," % v)
                ln = int(c.call("LPUSH", "list:%d" % i, v))
                if ln != v:
                    raise RuntimeError("LPUSH list:%d gave length %d, expected %d" % (i, ln, v))
                commands[i] += 3
                done(3)
                n += 1
                stall[i] = max(stall[i], time.monotonic() - t0)
            c.s.close()
        except Exception as e:  # noqa: BLE001 — every failure is reported
            with lock:
                errors.append("conn %d: %s" % (i, e))

    def shorts():
        # --short-ms 0: long-lived writers only.
        while a.short_ms > 0 and time.monotonic() < stop:
            port = None
            try:
                c = Conn(a.host, a.port, a.timeout)
                port = c.s.getsockname()[1]
                c.call("INCR", "short")
                c.s.close()
                short["ok"] += 1
            except Exception as e:  # noqa: BLE001
                short["failed"] += 1
                with lock:
                    # The client's port names the connection in the routers' logs.
                    errors.append("short (client port %s, %s): %s" % (port, time.strftime("%H:%M:%S"), e))
            time.sleep(a.short_ms / 1000)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(a.conns)]
    threads.append(threading.Thread(target=shorts))
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    wrong = []
    try:
        c = Conn(a.host, a.port, a.timeout)
        for i in range(a.conns):
            v = c.call("GET", "ctr:%d" % i)
            ln = int(c.call("LLEN", "list:%d" % i))
            if int(v or 0) != incrs[i] or ln != incrs[i]:
                wrong.append("ctr:%d=%s list=%d acked=%d" % (i, v, ln, incrs[i]))
        sv = int(c.call("GET", "short") or 0)
        if sv != short["ok"]:
            wrong.append("short=%d acked=%d" % (sv, short["ok"]))
        c.s.close()
    except Exception as e:  # noqa: BLE001
        errors.append("check: %s" % e)
    print(json.dumps({
        "commands": sum(commands),
        "errors": len(errors),
        "first_errors": errors[:5],
        "short_ok": short["ok"],
        "short_failed": short["failed"],
        "max_stall_ms": round(max(stall) * 1000, 1),
        "counters_checked": a.conns + 1,
        "counters_wrong": wrong[:5],
        "rate": {"start_ms": int(start_wall * 1000), "bucket_ms": 100, "counts": buckets},
    }))
    sys.exit(0 if not errors and not wrong else 1)


if __name__ == "__main__":
    main()
