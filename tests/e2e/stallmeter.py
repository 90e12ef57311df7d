#!/usr/bin/env python3
"""Measure the longest client-visible stall of a TCP echo stream.

Connects to an echo service (through the ftnet VIP), sends CHUNK bytes every INTERVAL ms for
DURATION seconds, reads the echo as it arrives, and records the largest gap between two
consecutive receipts after the warm-up. Then half-closes, drains the echo and checks that every
byte came back unchanged. Prints one JSON object; exit status 0 only if the stream was intact.

A replica crash or link cut during the run shows up as max_gap_ms (how long the client saw no
progress) and max_gap_start_epoch (when it began, to line up with the fault's time stamp).
"""
import argparse
import hashlib
import json
import os
import selectors
import socket
import struct
import sys
import time


def tcp_info(sock):
    """A few fields of Linux's struct tcp_info (include/uapi/linux/tcp.h): eight one-byte
    fields, then 32-bit ones; `reordering` is the 21st of those, `total_retrans` the 24th."""
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    except OSError:
        return {}
    if len(raw) < 104:
        return {}
    u32 = struct.unpack_from("<24I", raw, 8)
    return {"rto_us": u32[0], "reordering": u32[20], "total_retrans": u32[23]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="198.19.0.1")
    ap.add_argument("--port", type=int, default=7000)
    ap.add_argument("--chunk", type=int, default=4096, help="bytes per send")
    ap.add_argument("--interval-ms", type=float, default=1.0, help="time between sends")
    ap.add_argument("--duration", type=float, default=6.0, help="seconds of sending")
    ap.add_argument("--warmup", type=float, default=0.5, help="seconds ignored for gaps")
    ap.add_argument("--drain-timeout", type=float, default=30.0, help="seconds to wait for the rest")
    args = ap.parse_args()

    # A deterministic pattern (a hash, period 32 bytes), so a byte out of place is caught: the
    # stream's byte at offset o is PATTERN[o % 32]. Bytes are made when the socket takes them
    # (at most MAX_SEND per call), so a backlog after a stall costs nothing to hold: a queue of
    # pending bytes copied on every append grows quadratically, and once a catch-up takes longer
    # than real time the meter stops sending for good.
    base = hashlib.sha256(b"ftnet-stallmeter").digest()
    MAX_SEND = 1 << 20
    stream = base * (MAX_SEND // 32 + 2)

    t_connect = time.monotonic()
    sock = socket.create_connection((args.host, args.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)

    epoch0 = time.time()
    t0 = time.monotonic()
    connect_ms = (t0 - t_connect) * 1000
    interval = args.interval_ms / 1000.0
    sent_hash, recv_hash = hashlib.sha256(), hashlib.sha256()
    sent = received = 0
    due = 0  # bytes the steady source has produced so far (sent + backlog)
    next_send = t0
    send_end = t0 + args.duration
    last_rx = None
    gaps = []  # gap seconds after warm-up
    top = []  # the largest gaps as (seconds, start monotonic), at most TOP of them
    TOP = 20
    max_gap, max_gap_start = 0.0, None
    half_closed = False
    eof = False
    drain_deadline = None
    error = None
    send_blocked_max = 0.0
    blocked_since = None

    try:
        while not eof:
            now = time.monotonic()
            if now < send_end:
                # Every chunk that is due (catch up after a stall, like a steady source).
                if next_send <= now:
                    k = int((now - next_send) / interval) + 1
                    due += k * args.chunk
                    next_send += k * interval
            elif not half_closed and sent == due:
                sock.shutdown(socket.SHUT_WR)
                half_closed = True
                drain_deadline = now + args.drain_timeout
            if sent < due:
                off = sent % 32
                chunk = stream[off:off + min(due - sent, MAX_SEND)]
                try:
                    n = sock.send(chunk)
                    sent_hash.update(chunk[:n])
                    sent += n
                    if blocked_since is not None:
                        send_blocked_max = max(send_blocked_max, now - blocked_since)
                        blocked_since = None
                except BlockingIOError:
                    if blocked_since is None:
                        blocked_since = now
            if drain_deadline is not None and now > drain_deadline:
                error = "drain timeout: echo incomplete after %.0f s" % args.drain_timeout
                break
            timeout = max(0.0, min(next_send - time.monotonic(), 0.001)) if now < send_end else 0.05
            for _key, _ev in sel.select(timeout):
                while True:
                    try:
                        data = sock.recv(1 << 20)
                    except BlockingIOError:
                        break
                    t = time.monotonic()
                    if not data:
                        eof = True
                        break
                    recv_hash.update(data)
                    received += len(data)
                    if last_rx is not None and last_rx - t0 >= args.warmup and received < sent + len(data):
                        gap = t - last_rx
                        if gap > max_gap:
                            max_gap, max_gap_start = gap, last_rx
                        gaps.append(gap)
                        if len(top) < TOP or gap > top[-1][0]:
                            top.append((gap, last_rx))
                            top.sort(reverse=True)
                            del top[TOP:]
                    last_rx = t
    except OSError as e:
        error = "%s: %s" % (type(e).__name__, e)
    finally:
        info = tcp_info(sock)
        sock.close()

    intact = error is None and received == sent and sent_hash.digest() == recv_hash.digest()
    gaps.sort()
    result = {
        "ok": intact,
        "error": error,
        "sent_bytes": sent,
        "received_bytes": received,
        "echo_intact": sent_hash.digest() == recv_hash.digest() and received == sent,
        "connect_ms": round(connect_ms, 3),
        "duration_s": round(time.monotonic() - t0, 3),
        "max_gap_ms": round(max_gap * 1000, 3),
        "max_gap_start_s": round(max_gap_start - t0, 3) if max_gap_start else None,
        "max_gap_start_epoch": round(epoch0 + (max_gap_start - t0), 3) if max_gap_start else None,
        "p99_gap_ms": round(gaps[int(len(gaps) * 0.99)] * 1000, 3) if gaps else None,
        "median_gap_ms": round(gaps[len(gaps) // 2] * 1000, 3) if gaps else None,
        "send_blocked_max_ms": round(send_blocked_max * 1000, 3),
        "start_epoch": round(epoch0, 3),
        # The largest gaps with their start times, to find the one a fault caused.
        "top_gaps": [[round(g * 1000, 3), round(epoch0 + (s - t0), 3)] for g, s in top],
        "chunk": args.chunk,
        "interval_ms": args.interval_ms,
        # The client's TCP at the end: its duplicate-ACK threshold (Linux starts at 3 and raises
        # it on what it takes for reordering) and the segments it sent again.
        "tcp_reordering": info.get("reordering"),
        "tcp_total_retrans": info.get("total_retrans"),
    }
    print(json.dumps(result))
    return 0 if intact else 1


if __name__ == "__main__":
    sys.exit(main())
