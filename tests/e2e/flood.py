#!/usr/bin/env python3
"""A flood against the router while a legitimate client is measured (run in the client
namespace, as root: raw sockets with IP_HDRINCL, no scapy).

The legitimate client (this process): one persistent echo connection through the VIP, a 64-byte
message every --every-ms, each round trip timed and its bytes checked; and a fresh connection
(one echo) every 100 ms. The flood (a child process, so that it never holds this one's
interpreter), --pps packets per second for --seconds, one of:

  syn      SYNs from the client's address, random source ports and sequence numbers
  garbage  malformed packets to the VIP: bad TCP checksums, truncated or overlong IP lengths,
           bad data offsets, odd flag sets, option bytes that lie about their length, fragments,
           UDP, random bytes
  icmp     echo requests to the VIP and host-unreachable errors quoting random connections
  rst      RSTs with the legitimate connection's addresses and ports, random sequence numbers
  ack      ACKs and data-less segments on the legitimate connection, random sequence and
           acknowledgement numbers
  ctl-syn  SYNs to the router's control port (--ctl), never completed: from random source ports
           of addresses in the client's subnet that nobody holds (the router's SYN-ACKs go
           nowhere, so each stays half-open until the router's kernel gives it up)
  ctl-conn real TCP connections to the control port, --conn-rate per second, at most
           --max-open open at once, each one of: silent, a frame cut short, a length prefix far
           beyond any frame, a frame of garbage; each held until the router closes it (or the
           end); counted: opened, connected, answered (the router sent bytes), closed by the
           router at once (< 100 ms, no byte) or later, still open at the end
  none     nothing: the legitimate client only (while the scenario does something else)

Prints one JSON object: packets sent and the rate held, the probe's round trips (count, p50,
p99, max ms), errors, fresh connections (ok, failed, connect-to-echo time p50/p99/max ms).
Exit 0 when nothing failed.
"""
import argparse
import json
import multiprocessing
import os
import random
import resource
import selectors
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rawpkt import csum, ip_header, tcp_segment  # noqa: E402


def packets(kind, me, vip, port, tuple4, ctl=None, n=2048):
    rnd = random.Random(1)
    out = []
    for _ in range(n):
        if kind == "syn":
            out.append(ip_header(me, vip, 6, 20) + tcp_segment(me, vip, rnd.randrange(1024, 65535), port,
                                                            rnd.getrandbits(32), 0, 0x02))
        elif kind == "garbage":
            sport = rnd.randrange(1024, 65535)
            seg = tcp_segment(me, vip, sport, port, rnd.getrandbits(32), rnd.getrandbits(32),
                              rnd.choice([0x02, 0x10, 0x18, 0x03, 0x00, 0x3F, 0x29]))
            v = rnd.randrange(8)
            if v == 0:  # bad checksum
                seg = seg[:16] + struct.pack("!H", rnd.getrandbits(16)) + seg[18:]
                out.append(ip_header(me, vip, 6, len(seg)) + seg)
            elif v == 1:  # IP total length beyond the packet
                h = bytearray(ip_header(me, vip, 6, len(seg) + 400))
                out.append(bytes(h) + seg)
            elif v == 2:  # TCP data offset past the end
                seg = seg[:12] + bytes([15 << 4]) + seg[13:]
                out.append(ip_header(me, vip, 6, len(seg)) + seg)
            elif v == 3:  # options that lie about their length (fixed checksum)
                opts = bytes([2, 40, 5, 0xB4, 8, 0, 1, 1])
                hdr = struct.pack("!HHIIBBHHH", sport, port, rnd.getrandbits(32), 0, 7 << 4, 0x02,
                                  65535, 0, 0) + opts
                pseudo = socket.inet_aton(me) + socket.inet_aton(vip) + struct.pack("!BBH", 0, 6, len(hdr))
                hdr = hdr[:16] + struct.pack("!H", csum(pseudo + hdr)) + hdr[18:]
                out.append(ip_header(me, vip, 6, len(hdr)) + hdr)
            elif v == 4:  # a fragment
                h = bytearray(ip_header(me, vip, 6, len(seg)))
                h[6:8] = struct.pack("!H", 0x2000 | rnd.randrange(1, 100))
                h[10:12] = b"\0\0"
                h[10:12] = struct.pack("!H", csum(bytes(h)))
                out.append(bytes(h) + seg)
            elif v == 5:  # UDP to the VIP
                udp = struct.pack("!HHHH", sport, port, 8 + 16, 0) + os.urandom(16)
                out.append(ip_header(me, vip, 17, len(udp)) + udp)
            elif v == 6:  # random bytes as TCP
                junk = os.urandom(rnd.randrange(1, 60))
                out.append(ip_header(me, vip, 6, len(junk)) + junk)
            else:  # a header cut short
                out.append(ip_header(me, vip, 6, 10) + seg[:10])
        elif kind == "icmp":
            if rnd.random() < 0.5:
                body = struct.pack("!BBHHH", 8, 0, 0, rnd.getrandbits(16), 1) + os.urandom(32)
            else:
                inner = ip_header(vip, me, 6, 20) + tcp_segment(vip, me, port, rnd.randrange(1024, 65535),
                                                                rnd.getrandbits(32), 0, 0x12)[:8]
                body = struct.pack("!BBHI", 3, 1, 0, 0) + inner
            body = body[:2] + struct.pack("!H", csum(body)) + body[4:]
            out.append(ip_header(me, vip, 1, len(body)) + body)
        elif kind == "ctl-syn":
            ctl_host, ctl_port = ctl
            src = me.rsplit(".", 1)[0] + "." + str(rnd.randrange(100, 228))
            out.append(ip_header(src, ctl_host, 6, 20) + tcp_segment(src, ctl_host, rnd.randrange(1024, 65535),
                                                                     ctl_port, rnd.getrandbits(32), 0, 0x02))
        elif kind in ("rst", "ack"):
            src, sport, dst, dport = tuple4
            flags = 0x04 if kind == "rst" else rnd.choice([0x10, 0x10, 0x18])
            payload = b"" if kind == "rst" or flags == 0x10 else os.urandom(rnd.randrange(1, 64))
            seg = tcp_segment(src, dst, sport, dport, rnd.getrandbits(32), rnd.getrandbits(32), flags,
                              payload=payload)
            out.append(ip_header(src, dst, 6, len(seg)) + seg)
        else:
            raise SystemExit(f"unknown kind {kind}")
    return out


def flood(kind, me, vip, port, tuple4, pps, seconds, result, ctl=None, conn_rate=0, max_open=0):
    if kind == "none":
        time.sleep(seconds)
        result.put({"sent": 0, "send_errors": 0, "pps": 0})
        return
    if kind == "ctl-conn":
        result.put(conn_flood(ctl, conn_rate, max_open, seconds))
        return
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
    pk = packets(kind, me, vip, port, tuple4, ctl)
    sent = errors = 0
    t0 = time.monotonic()
    end = t0 + seconds
    i = 0
    while True:
        now = time.monotonic()
        if now >= end:
            break
        due = int((now - t0) * pps)
        while sent + errors < due:
            try:
                p = pk[i % len(pk)]
                s.sendto(p, (socket.inet_ntoa(p[16:20]), 0))
                sent += 1
            except OSError:
                errors += 1
            i += 1
        time.sleep(0.001)
    el = time.monotonic() - t0
    result.put({"sent": sent, "send_errors": errors, "pps": round(sent / el) if el else 0})


# What a ctl-conn connection sends once connected (the control protocol: a 4-byte big-endian
# length, then that many bytes of JSON).
CONN_MODES = {
    "silent": lambda: b"",
    "partial": lambda: struct.pack(">I", 200) + b'{"type":"hello","version":',
    "huge": lambda: struct.pack(">I", 0xFFFFFFF0) + b"x" * 64,
    "garbage": lambda: struct.pack(">I", 64) + os.urandom(64),
}


def conn_flood(ctl, rate, max_open, seconds):
    """Connections to the control port at `rate` per second for `seconds`, at most `max_open` at
    once, each held until the router closes it; then the rest are closed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, max_open + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    sel = selectors.DefaultSelector()
    modes = list(CONN_MODES)
    c = {"opened": 0, "connect_failed": 0, "connected": 0, "answered": 0, "closed_at_once": 0,
         "closed_later": 0, "reset": 0, "open_at_end": 0, "max_open": 0, "skipped_full": 0}
    by_mode = {m: 0 for m in modes}
    at_once = {m: 0 for m in modes}
    lifetimes = []
    live = {}  # fd -> [sock, mode, t_connected or None, answered]

    def close(fd, how):
        sock, mode, t, answered = live.pop(fd)
        sel.unregister(sock)
        sock.close()
        if how is None:
            return
        life = time.monotonic() - t
        lifetimes.append(life)
        if life < 0.1 and not answered:
            c["closed_at_once"] += 1
            at_once[mode] += 1
        else:
            c["closed_later"] += 1
        if how == "reset":
            c["reset"] += 1

    t0 = time.monotonic()
    end = t0 + seconds
    while True:
        now = time.monotonic()
        if now >= end:
            break
        due = int((now - t0) * rate)
        while c["opened"] + c["skipped_full"] < due:
            if len(live) >= max_open:
                c["skipped_full"] += 1
                continue
            s = socket.socket()
            s.setblocking(False)
            mode = modes[(c["opened"]) % len(modes)]
            s.connect_ex(ctl)
            c["opened"] += 1
            by_mode[mode] += 1
            live[s.fileno()] = [s, mode, None, False]
            sel.register(s, selectors.EVENT_WRITE)
        c["max_open"] = max(c["max_open"], len(live))
        for key, ev in sel.select(timeout=0.001):
            fd = key.fd
            if fd not in live:
                continue
            ent = live[fd]
            sock = ent[0]
            if ent[2] is None:
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    c["connect_failed"] += 1
                    close(fd, None)
                    continue
                c["connected"] += 1
                ent[2] = time.monotonic()
                try:
                    sock.send(CONN_MODES[ent[1]]())
                except OSError:
                    pass
                sel.modify(sock, selectors.EVENT_READ)
                continue
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                close(fd, "reset")
                continue
            if data:
                if not ent[3]:
                    c["answered"] += 1
                    ent[3] = True
            else:
                close(fd, "eof")
    c["open_at_end"] = len(live)
    for fd in list(live):
        close(fd, None)
    el = time.monotonic() - t0
    lifetimes.sort()
    c["modes"] = by_mode
    c["at_once_by_mode"] = at_once
    c["lifetime_p50_ms"] = round(lifetimes[len(lifetimes) // 2] * 1000) if lifetimes else None
    c["lifetime_max_ms"] = round(lifetimes[-1] * 1000) if lifetimes else None
    # The rate held: connections opened per second.
    return {"sent": c["opened"], "send_errors": c["connect_failed"], "pps": round(c["opened"] / el) if el else 0,
            "conns": c}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vip", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--kind", required=True, choices=["syn", "garbage", "icmp", "rst", "ack", "ctl-syn", "ctl-conn", "none"])
    ap.add_argument("--ctl", default="198.18.1.1:7400", help="the router's control port (ctl-*)")
    ap.add_argument("--conn-rate", type=int, default=1000, help="ctl-conn: connections per second")
    ap.add_argument("--max-open", type=int, default=2000, help="ctl-conn: at most this many open at once")
    ap.add_argument("--pps", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--every-ms", type=float, default=5.0)
    a = ap.parse_args()

    c = socket.create_connection((a.vip, a.port), timeout=5)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    me, sport = c.getsockname()
    tuple4 = (me, sport, a.vip, a.port)
    h, p = a.ctl.rsplit(":", 1)
    ctl = (h, int(p))
    q = multiprocessing.Queue()
    child = multiprocessing.Process(target=flood, args=(a.kind, me, a.vip, a.port, tuple4, a.pps, a.seconds, q,
                                                        ctl, a.conn_rate, a.max_open))
    rtts, errors, fresh_ms = [], [], []
    fresh_ok = fresh_failed = 0
    t0 = time.monotonic()
    child.start()
    next_fresh = t0
    n = 0
    while time.monotonic() < t0 + a.seconds + 0.5:
        msg = (b"%08d" % n) * 8
        n += 1
        s = time.monotonic()
        try:
            c.sendall(msg)
            got = b""
            c.settimeout(5)
            while len(got) < len(msg):
                b = c.recv(len(msg) - len(got))
                if not b:
                    raise OSError("connection closed")
                got += b
            if got != msg:
                raise OSError("echo differs")
            rtts.append((time.monotonic() - s) * 1000)
        except OSError as e:
            errors.append(f"{time.monotonic() - t0:.2f}s: {e}")
            break
        if time.monotonic() >= next_fresh:
            next_fresh += 0.1
            try:
                ft = time.monotonic()
                f = socket.create_connection((a.vip, a.port), timeout=3)
                f.settimeout(3)
                f.sendall(b"fresh\n")
                ok = f.recv(16) == b"fresh\n"
                f.close()
                if ok:
                    fresh_ms.append((time.monotonic() - ft) * 1000)
                fresh_ok += ok
                fresh_failed += not ok
            except OSError:
                fresh_failed += 1
        d = a.every_ms / 1000 - (time.monotonic() - s)
        if d > 0:
            time.sleep(d)
    try:
        fl = q.get(timeout=a.seconds + 10)
    except Exception:  # noqa: BLE001 (queue.Empty: the flood died)
        fl = {"sent": 0, "pps": 0, "send_errors": 0}
    child.join(timeout=10)
    rtts.sort()
    fresh_ms.sort()

    def pctl(v, p):
        return round(v[min(len(v) - 1, int(len(v) * p))], 2) if v else None
    pct = lambda p: pctl(rtts, p)  # noqa: E731
    res = {"kind": a.kind, "target_pps": a.pps, **fl, "seconds": a.seconds,
           "rtt_n": len(rtts), "rtt_p50_ms": pct(0.5), "rtt_p99_ms": pct(0.99),
           "rtt_max_ms": round(rtts[-1], 2) if rtts else None, "errors": errors,
           "fresh_ok": fresh_ok, "fresh_failed": fresh_failed, "fresh_p50_ms": pctl(fresh_ms, 0.5),
           "fresh_p99_ms": pctl(fresh_ms, 0.99), "fresh_max_ms": round(fresh_ms[-1], 2) if fresh_ms else None}
    print(json.dumps(res))
    return 0 if not errors and fresh_failed == 0 and rtts else 1


if __name__ == "__main__":
    sys.exit(main())
