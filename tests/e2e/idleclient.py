#!/usr/bin/env python3
"""A Redis client whose connection sits idle while a replica fails, then is used again.

Opens one connection to the VIP, sends INCR, writes READY_FILE, stays idle for --idle seconds
(the test injects the fault then), and sends --after more INCRs on the same connection. Prints
one JSON object; exit status 0 only if every reply is the expected counter value. A replica that
dies while a connection is idle closes its socket with a bare FIN, which the router must take as
evidence of that replica's crash, not as the server closing the connection (COSCANet-FT §III-C/D).
"""
import argparse
import json
import socket
import sys
import time


def keepalives_sent():
    """The namespace's count of keep-alive probes sent (TcpExt TCPKeepAlive)."""
    with open("/proc/net/netstat") as f:
        lines = f.read().splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            row = dict(zip(names.split()[1:], values.split()[1:]))
            return int(row.get("TCPKeepAlive", 0))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="198.19.0.1")
    ap.add_argument("--port", type=int, default=6379)
    ap.add_argument("--ready-file", required=True)
    ap.add_argument("--idle", type=float, default=2.0)
    ap.add_argument("--after", type=int, default=5)
    ap.add_argument("--keepalive", type=int, default=0, metavar="COUNT",
                    help="TCP keep-alive on the connection: a probe after 1 s idle, then every 1 s; "
                         "the kernel drops the connection after COUNT unanswered probes (0: off)")
    args = ap.parse_args()

    replies, errors = [], []
    sock = socket.create_connection((args.host, args.port), timeout=10)
    if args.keepalive:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, args.keepalive)

    def incr(i):
        t = time.monotonic()
        try:
            sock.sendall(b"INCR idle:counter\r\n")
            data = b""
            while not data.endswith(b"\r\n"):
                chunk = sock.recv(100)
                if not chunk:
                    errors.append("request %d: connection closed by the VIP (EOF)" % i)
                    return
                data += chunk
            replies.append([data.decode(errors="replace").strip(), round((time.monotonic() - t) * 1000, 3)])
        except OSError as e:
            errors.append("request %d: %s: %s" % (i, type(e).__name__, e))

    incr(1)
    probes_before = keepalives_sent()
    open(args.ready_file, "w").close()
    time.sleep(args.idle)
    probes = keepalives_sent() - probes_before
    for i in range(2, args.after + 2):
        if errors:
            break
        incr(i)
        time.sleep(0.1)
    sock.close()
    want = [":%d" % i for i in range(1, args.after + 2)]
    got = [r[0] for r in replies]
    ok = not errors and got == want
    print(json.dumps({"ok": ok, "replies_ms": replies, "expected": want, "errors": errors,
                      "keepalives_sent_while_idle": probes}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
