#!/usr/bin/env python3
"""The fault campaign's load: clients of one lab's services, run in its client namespace until a
stop file appears (or --max-seconds pass), every reply checked.

  --echo PORT    K echo streams (--streams): 1 KiB of seeded random bytes every 2 ms each, every
                 byte checked as it comes back; a stream ends cleanly after 3-8 s (half-close,
                 the rest drained and checked) and a new one starts, so connections open and
                 close through the faults too. (A stateless service's open connection never
                 gets a replica back: one that lives through as many replica faults as there
                 are replicas has none left. Short streams keep that rare; the campaign counts
                 such a failure apart.)
  --http PORT    a download loop (GET /big.bin, MD5 against --big) and an upload loop (PUT
                 /upload/<n>.bin, 256 KiB-1 MiB of random bytes; each acknowledged upload's name
                 and MD5 are listed for the campaign to find on the replicas).
  --redis PORT   --writers long-lived connections, each a loop of INCR ctr:<i> then RPUSH
                 list:<i> <n> (one command at a time, each reply checked), a fresh connection
                 every 200 ms (INCR short); at the end every counter and list length is read back
                 and must equal what the clients saw acknowledged.

Every silence longer than --gap-ms on a stream or a command (a stall) is listed with its start
(epoch ms) and length, and every failure (a connection broken, a reply wrong) with its time, so
that the campaign can lay them against its faults. Prints one JSON object on stdout.
"""
import argparse
import hashlib
import http.client
import json
import os
import random
import socket
import sys
import threading
import time

LOCK = threading.Lock()
OUT = {"echo": {"streams": 0, "bytes": 0}, "http": {"downloads": 0, "uploads": []},
       "redis": {"commands": 0, "short": 0}, "errors": [], "stalls": []}


def now_ms():
    return time.time() * 1000.0


def error(kind, what, since_ms=None, last_ms=None, port=None):
    """A failure; `since_ms`: when its connection opened, `last_ms`: when it last made progress
    (a timeout is reported long after the fault that caused it); `port`: the connection's client
    port, where known (the routers' log names connections by it)."""
    with LOCK:
        OUT["errors"].append({"t_ms": round(last_ms or now_ms()), "kind": kind, "what": str(what)[:300],
                              "since_ms": round(since_ms) if since_ms else None, "port": port})


def local_port(c):
    """The client port of an http.client connection, if it connected."""
    try:
        return c.sock.getsockname()[1] if c.sock else None
    except OSError:
        return None


def diagnose(a, s, why):
    """What the client's kernel and the router know of a stuck connection: `ss -tinoe` for its
    socket and, with --diag, that command's output (the router's status)."""
    import subprocess
    try:
        port = s.getsockname()[1]
    except OSError:
        return
    d = {"t_ms": round(now_ms()), "why": why, "port": port}
    try:
        d["ss"] = subprocess.run(["ss", "-tinoeH", f"sport = :{port}"], capture_output=True, text=True,
                                 timeout=10).stdout[-3000:]
        if a.diag:
            d["diag"] = subprocess.run(a.diag, shell=True, capture_output=True, text=True,
                                       timeout=20).stdout[-20000:]
    except (OSError, subprocess.SubprocessError) as e:
        d["failed"] = str(e)
    with LOCK:
        OUT.setdefault("diagnoses", []).append(d)


def stall(kind, start_ms, ms):
    with LOCK:
        OUT["stalls"].append({"t_ms": round(start_ms), "kind": kind, "ms": round(ms, 1)})


def stopped(a, t_end):
    return os.path.exists(a.stop_file) or time.monotonic() > t_end


# ---------------------------------------------------------------- echo
def echo_stream(a, seed, t_end):
    rnd = random.Random(seed)
    life = rnd.uniform(a.stream_min_s, a.stream_max_s)
    opened = now_ms()
    data = rnd.randbytes(1024 * 64)
    try:
        s = socket.create_connection((a.host, a.echo), timeout=10)
    except OSError as e:
        error("echo", f"connect: {e}")
        return
    port = s.getsockname()[1]
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(30)
    sent = [0]
    done = threading.Event()
    failed = []
    progress = [now_ms()]

    def reader():
        got = 0
        last = now_ms()
        try:
            while True:
                b = s.recv(65536)
                t = now_ms()
                if not b:
                    break
                if t - last > a.gap_ms and got < sent[0]:
                    stall("echo", last, t - last)
                last = t
                progress[0] = t
                n = len(b)
                off = got % len(data)
                exp = (data[off:] + data)[:n] if off + n > len(data) else data[off:off + n]
                if b != exp:
                    failed.append(f"echo differs at byte {got}")
                    break
                got += n
        except OSError as e:
            failed.append(f"receive: {e}")
        if not failed and got != sent[0]:
            failed.append(f"stream ended with {got} of {sent[0]} bytes back")
        with LOCK:
            OUT["echo"]["bytes"] += got
        done.set()

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < life and not stopped(a, t_end) and not done.is_set():
            off = sent[0] % len(data)
            chunk = (data[off:] + data)[:1024]
            s.sendall(chunk)
            sent[0] += len(chunk)
            time.sleep(0.002)
        s.shutdown(socket.SHUT_WR)
    except OSError as e:
        failed.append(f"send: {e}")
    th.join(timeout=35)
    if not done.is_set():
        failed.append("echo not drained within 35 s")
        diagnose(a, s, "echo not drained")
    s.close()
    with LOCK:
        OUT["echo"]["streams"] += 1
    for f in failed:
        error("echo", f, opened, progress[0], port=port)


def echo_worker(a, k, t_end):
    i = 0
    while not stopped(a, t_end):
        echo_stream(a, k * 100000 + i, t_end)
        i += 1


# ---------------------------------------------------------------- http
def http_conn(a):
    return http.client.HTTPConnection(a.host, a.http, timeout=30)


def download_worker(a, t_end):
    want = hashlib.md5(open(a.big, "rb").read()).hexdigest()
    while not stopped(a, t_end):
        t = now_ms()
        c, port = None, None
        try:
            c = http_conn(a)
            c.connect()
            port = local_port(c)
            c.request("GET", "/big.bin")
            r = c.getresponse()
            body = r.read()
            c.close()
            if r.status != 200 or hashlib.md5(body).hexdigest() != want:
                error("download", f"status {r.status}, {len(body)} bytes, md5 {'ok' if hashlib.md5(body).hexdigest() == want else 'differs'}", t, port=port)
            else:
                with LOCK:
                    OUT["http"]["downloads"] += 1
        except (OSError, http.client.HTTPException) as e:
            error("download", f"{e!r} after {now_ms() - t:.0f} ms", t, port=port)
        time.sleep(0.05)


def upload_worker(a, t_end):
    rnd = random.Random(7)
    n = 0
    while not stopped(a, t_end):
        body = rnd.randbytes(rnd.randrange(256 * 1024, 1024 * 1024))
        name = f"u{n:05d}.bin"
        n += 1
        t = now_ms()
        port = None
        try:
            c = http_conn(a)
            c.connect()
            port = local_port(c)
            c.request("PUT", f"/upload/{name}", body=body)
            r = c.getresponse()
            r.read()
            c.close()
            if r.status in (201, 204):
                with LOCK:
                    OUT["http"]["uploads"].append({"name": name, "md5": hashlib.md5(body).hexdigest(),
                                                   "t_ms": round(t), "done_ms": round(now_ms())})
            else:
                error("upload", f"{name}: status {r.status}", t, port=port)
        except (OSError, http.client.HTTPException) as e:
            error("upload", f"{name}: {e!r} after {now_ms() - t:.0f} ms", t, port=port)
        time.sleep(0.1)


# ---------------------------------------------------------------- redis
def cmd(*args):
    out = [b"*%d\r\n" % len(args)]
    for x in args:
        x = x if isinstance(x, bytes) else str(x).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(x), x))
    return b"".join(out)


class Redis:
    def __init__(self, a):
        self.s = socket.create_connection((a.host, a.redis), timeout=30)
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

    def call(self, *args):
        self.s.sendall(cmd(*args))
        ln = self.line()
        if ln[:1] == b":":
            return int(ln[1:])
        if ln[:1] == b"$":
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
        raise RuntimeError(f"unexpected reply {ln[:80]!r}")


ACKED = {}


def writer(a, i, t_end):
    """Writer i: a connection broken midway is an error; the writer then starts again on new keys
    (ctr:<i>.<generation>), and the command in flight when it broke may or may not have been
    applied (its counter may be one more than acknowledged)."""
    gen = 0
    while not stopped(a, t_end):
        key = f"{i}.{gen}"
        incr = push = 0
        pending = None
        try:
            r = Redis(a)
            while not stopped(a, t_end):
                for c in (("INCR", f"ctr:{key}"), ("RPUSH", f"list:{key}", incr)):
                    pending = c[0]
                    t = now_ms()
                    v = r.call(*c)
                    d = now_ms() - t
                    if d > a.gap_ms:
                        stall("redis", t, d)
                    if c[0] == "INCR":
                        if v != incr + 1:
                            raise RuntimeError(f"INCR ctr:{key} gave {v}, expected {incr + 1}")
                        incr += 1
                    else:
                        if v != push + 1:
                            raise RuntimeError(f"RPUSH list:{key} gave {v}, expected {push + 1}")
                        push += 1
                    pending = None
                with LOCK:
                    OUT["redis"]["commands"] += 2
                time.sleep(0.002)
            r.s.close()
        except (OSError, RuntimeError, ValueError) as e:
            error("redis", f"writer {key}: {e}")
            time.sleep(0.1)
        with LOCK:
            ACKED[key] = (incr, push, pending)
        gen += 1


def short_worker(a, t_end):
    ok = 0
    while not stopped(a, t_end):
        try:
            r = Redis(a)
            r.call("INCR", "short")
            r.s.close()
            ok += 1
        except (OSError, RuntimeError, ValueError) as e:
            error("redis", f"short connection: {e}")
            with LOCK:
                OUT["redis"]["short_failed"] = OUT["redis"].get("short_failed", 0) + 1
        time.sleep(0.2)
    with LOCK:
        OUT["redis"]["short"] = ok


def redis_check(a):
    r = Redis(a)
    wrong = []
    for key, (incr, push, pending) in sorted(ACKED.items()):
        c = int(r.call("GET", f"ctr:{key}") or 0)
        n = r.call("LLEN", f"list:{key}")
        ok_c = c == incr or (pending == "INCR" and c == incr + 1)
        ok_n = n == push or (pending == "RPUSH" and n == push + 1)
        if not (ok_c and ok_n):
            wrong.append(f"writer {key}: ctr {c} (acked {incr}), list {n} (acked {push}), in flight {pending}")
    s = int(r.call("GET", "short") or 0)
    if not OUT["redis"]["short"] <= s <= OUT["redis"]["short"] + OUT["redis"].get("short_failed", 0):
        wrong.append(f"short {s} (acked {OUT['redis']['short']}, failed {OUT['redis'].get('short_failed', 0)})")
    OUT["redis"]["wrong"] = wrong
    OUT["redis"]["keys_checked"] = len(ACKED)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="198.19.0.1")
    ap.add_argument("--echo", type=int)
    ap.add_argument("--streams", type=int, default=3)
    ap.add_argument("--stream-min-s", type=float, default=3.0, help="an echo stream's shortest life")
    ap.add_argument("--stream-max-s", type=float, default=8.0, help="an echo stream's longest life")
    ap.add_argument("--http", type=int)
    ap.add_argument("--big", help="the file /big.bin serves, for its MD5")
    ap.add_argument("--redis", type=int)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--gap-ms", type=float, default=20.0)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--max-seconds", type=float, default=7200)
    ap.add_argument("--diag", help="shell command whose output is kept with a stuck connection's "
                    "socket state (e.g. the router's status)")
    a = ap.parse_args()
    t_end = time.monotonic() + a.max_seconds
    ths = []
    if a.echo:
        ths += [threading.Thread(target=echo_worker, args=(a, k, t_end)) for k in range(a.streams)]
    if a.http:
        ths += [threading.Thread(target=download_worker, args=(a, t_end)),
                threading.Thread(target=upload_worker, args=(a, t_end))]
    if a.redis:
        ths += [threading.Thread(target=writer, args=(a, i, t_end)) for i in range(a.writers)]
        ths.append(threading.Thread(target=short_worker, args=(a, t_end)))
    OUT["start_ms"] = round(now_ms())
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    OUT["end_ms"] = round(now_ms())
    if a.redis:
        try:
            redis_check(a)
        except (OSError, RuntimeError, ValueError) as e:
            error("redis", f"read-back: {e}")
    print(json.dumps(OUT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
