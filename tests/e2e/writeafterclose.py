#!/usr/bin/env python3
"""A client that keeps writing after the server closed: how soon does it learn?

Connects to HOST:PORT, sends a malformed Redis request (Redis answers with a protocol error and
closes the connection; its kernel then resets the client's next write), waits for the server's
FIN (so that its kernel acknowledged it), then writes PING every
100 ms for at most --seconds. Prints JSON: the server's reply, whether and after how many writes
the client saw the connection fail (EPIPE/ECONNRESET, or EOF on read), and after how long.
Exit 0 if the client learnt the connection is gone within the time, 1 otherwise.
"""
import argparse, json, socket, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--host", required=True)
ap.add_argument("--port", type=int, default=6379)
ap.add_argument("--seconds", type=float, default=5.0)
a = ap.parse_args()

s = socket.create_connection((a.host, a.port), timeout=5)
s.sendall(b"*1\r\n$abc\r\n")  # malformed bulk length: Redis "Protocol error", then close
s.settimeout(2)
reply = b""
try:
    while not reply.endswith(b"\r\n"):
        chunk = s.recv(4096)
        if not chunk:
            break
        reply += chunk
except socket.timeout:
    pass
# Wait for the server's FIN (EOF), so that the client has acknowledged it before it writes.
fin = False
try:
    fin = s.recv(4096) == b""
except socket.timeout:
    pass
time.sleep(0.05)
t0 = time.monotonic()
writes, failed, how = 0, False, ""
while time.monotonic() - t0 < a.seconds and writes < 100:
    try:
        s.sendall(b"PING\r\n")
        writes += 1
    except OSError as e:
        failed, how = True, f"write: {e.strerror}"
        break
    time.sleep(0.1)
print(json.dumps({"reply": reply.decode(errors="replace").strip(), "fin": fin, "writes_ok": writes, "failed": failed,
                  "how": how, "after_ms": round((time.monotonic() - t0) * 1000)}))
sys.exit(0 if failed else 1)
