#!/usr/bin/env python3
"""ftnet benchmark helpers (python3 stdlib only). Each client subcommand prints one JSON object.

  echo-server --port P            TCP echo server, one thread, non-blocking (deterministic, so replicable)
  rr   --host H --port P          1-byte request/response round trips on one connection (lat_tcp)
  cps  --host H --port P          new connections per second: connect, 1 byte out, 1 byte back, close
  dl   --url U --streams S        S parallel curls to /dev/null; aggregate bytes / wall time
  up   --host H --port P --mb M   send M MiB to a sink, half-close, wait for the sink's close
  idle --host H --port P --conns N --rss-pid PID
                                  open N connections (1 byte echoed on each), keep them idle, and
                                  sample the resident memory of process PID along the way
"""
import argparse
import json
import os
import resource
import selectors
import socket
import subprocess
import sys
import threading
import time


def raise_nofile():
    """Thousands of sockets need more than the usual 1024 descriptors (root may raise the cap)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1 << 20
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def echo_server(args):
    """One thread, one selector: cheap per connection (a thread per connection made the server,
    not the middle box, the bottleneck of `cps`), and many thousands of idle connections are fine.
    Each replica reads and echoes the same bytes; the chunking of the echo may differ between
    replicas, which the router's first-copy-wins merge absorbs."""
    raise_nofile()
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", args.port))
    ls.listen(4096)
    ls.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(ls, selectors.EVENT_READ, None)
    pending = {}  # socket -> bytes not yet written back

    def close(c):
        sel.unregister(c)
        pending.pop(c, None)
        c.close()

    while True:
        for key, ev in sel.select():
            c = key.fileobj
            if c is ls:
                while True:
                    try:
                        n, _ = ls.accept()
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:
                        break
                    n.setblocking(False)
                    n.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    sel.register(n, selectors.EVENT_READ, None)
                continue
            try:
                if ev & selectors.EVENT_WRITE:
                    buf = pending[c]
                    k = c.send(buf)
                    buf = buf[k:]
                    if buf:
                        pending[c] = buf
                    else:
                        del pending[c]
                        sel.modify(c, selectors.EVENT_READ)
                    continue
                d = c.recv(65536)
                if not d:
                    close(c)
                    continue
                k = c.send(d)
                if k < len(d):
                    # The peer is slow: stop reading until this is written (bounded memory).
                    pending[c] = d[k:]
                    sel.modify(c, selectors.EVENT_WRITE)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                close(c)


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit("idle: no VmRSS for pid %d" % pid)


def idle(args):
    """Open --conns connections, one at a time, each with one echoed byte (so the router has an
    established connection with data seen both ways), keep all of them open and idle, and
    sample the router's resident set size at checkpoints and once more after --hold seconds."""
    raise_nofile()
    steps = sorted({int(x) for x in args.steps.split(",") if 0 < int(x) < args.conns} | {args.conns})
    time.sleep(0.5)
    points = [[0, rss_kb(args.rss_pid)]]
    socks, fails = [], 0
    t0 = time.monotonic()
    for target in steps:
        while len(socks) < target:
            if time.monotonic() - t0 > args.max_seconds:
                break
            try:
                s = socket.create_connection((args.host, args.port), timeout=5)
                s.sendall(b"x")
                if s.recv(1) != b"x":
                    fails += 1
                socks.append(s)
            except OSError:
                fails += 1
                if fails > 50:
                    break
        if target and len(socks) == target:
            time.sleep(0.5)  # the router's status snapshot and allocator settle
            points.append([target, rss_kb(args.rss_pid)])
    time.sleep(args.hold)
    held = [len(socks), rss_kb(args.rss_pid)]
    for s in socks:
        s.close()
    n, kb0 = points[-1][0], points[0][1]
    per = round((points[-1][1] - kb0) * 1024 / n) if n else None
    # Per connection between consecutive checkpoints: flat if the cost does not grow with the count.
    slopes = [round((b[1] - a[1]) * 1024 / (b[0] - a[0])) for a, b in zip(points, points[1:]) if b[0] > a[0]]
    print(json.dumps({"ok": fails == 0 and n == args.conns, "conns": n, "fails": fails,
                      "points_kb": points, "held_kb": held, "hold_s": args.hold,
                      "bytes_per_conn": per, "slopes_bytes_per_conn": slopes}))


def pct(sorted_vals, p):
    if not sorted_vals:
        return None
    return sorted_vals[min(len(sorted_vals) - 1, int(len(sorted_vals) * p))]


def rr(args):
    s = socket.create_connection((args.host, args.port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    b = b"x"
    lat = []
    deadline = time.monotonic() + args.max_seconds
    for i in range(args.warmup + args.count):
        t0 = time.perf_counter_ns()
        s.sendall(b)
        if not s.recv(1):
            raise SystemExit("rr: connection closed")
        t1 = time.perf_counter_ns()
        if i >= args.warmup:
            lat.append((t1 - t0) / 1000.0)
        if time.monotonic() > deadline:
            break
    s.close()
    lat.sort()
    print(json.dumps({"n": len(lat), "mean_us": round(sum(lat) / len(lat), 2),
                      "p50_us": round(pct(lat, 0.50), 2), "p99_us": round(pct(lat, 0.99), 2)}))


def cps(args):
    n = fails = 0
    t0 = time.monotonic()
    end = t0 + args.seconds
    while time.monotonic() < end and n < args.max_count:
        try:
            s = socket.create_connection((args.host, args.port), timeout=5)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(b"x")
            if s.recv(1) != b"x":
                fails += 1
            s.close()
            n += 1
        except OSError:
            fails += 1
            if fails > 50:
                break
    dt = time.monotonic() - t0
    print(json.dumps({"conns": n, "fails": fails, "seconds": round(dt, 3), "conn_per_s": round(n / dt, 1)}))


def dl(args):
    cmd = ["curl", "-sS", "-f", "--max-time", str(args.max_time), "-o", "/dev/null",
           "-w", "%{size_download} %{time_total}", args.url]
    epoch0 = time.time()
    t0 = time.monotonic()
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(args.streams)]
    if args.started_file:
        with open(args.started_file, "w") as f:
            f.write("%.4f\n" % epoch0)
    outs = [p.communicate() for p in procs]
    wall = time.monotonic() - t0
    total, per, errs = 0, [], []
    for p, (o, e) in zip(procs, outs):
        try:
            size, tt = o.decode().split()
            total += int(float(size))
            per.append(float(tt))
        except ValueError:
            pass
        if p.returncode != 0:
            errs.append("rc=%d %s" % (p.returncode, e.decode()[:200]))
    ok = not errs and (args.expect is None or total == args.expect * args.streams)
    print(json.dumps({"ok": ok, "bytes": total, "wall_s": round(wall, 4), "start_epoch": round(epoch0, 4), "curl_time_s": per,
                      "gbit_s": round(total * 8 / wall / 1e9, 4), "errors": errs}))


def up(args):
    buf = os.urandom(1 << 20)
    total = args.mb << 20
    s = socket.create_connection((args.host, args.port), timeout=30)
    t0 = time.monotonic()
    sent = 0
    while sent < total:
        sent += s.send(memoryview(buf)[: min(len(buf), total - sent)])
    s.shutdown(socket.SHUT_WR)
    # the sink closes after reading EOF, i.e. after it has read every byte
    while s.recv(65536):
        pass
    wall = time.monotonic() - t0
    s.close()
    print(json.dumps({"ok": True, "bytes": sent, "wall_s": round(wall, 4), "gbit_s": round(sent * 8 / wall / 1e9, 4)}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("echo-server")
    p.add_argument("--port", type=int, required=True)
    p.set_defaults(fn=echo_server)
    p = sub.add_parser("rr")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--count", type=int, default=5000)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--max-seconds", type=float, default=30)
    p.set_defaults(fn=rr)
    p = sub.add_parser("cps")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--seconds", type=float, default=3)
    p.add_argument("--max-count", type=int, default=20000)
    p.set_defaults(fn=cps)
    p = sub.add_parser("dl")
    p.add_argument("--url", required=True)
    p.add_argument("--streams", type=int, default=1)
    p.add_argument("--expect", type=int, help="bytes per stream")
    p.add_argument("--max-time", type=int, default=120)
    p.add_argument("--started-file", help="written as soon as the curls are started (for fault timing)")
    p.set_defaults(fn=dl)
    p = sub.add_parser("up")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mb", type=int, default=100)
    p.set_defaults(fn=up)
    p = sub.add_parser("idle")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--conns", type=int, default=10000)
    p.add_argument("--steps", default="0,1000,2500,5000,7500")
    p.add_argument("--rss-pid", type=int, required=True)
    p.add_argument("--hold", type=float, default=5)
    p.add_argument("--max-seconds", type=float, default=120)
    p.set_defaults(fn=idle)
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
