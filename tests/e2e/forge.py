#!/usr/bin/env python3
"""An agent session with a forger on its path (control channel integrity).

Speaks the control protocol as `ftnet agent` does: registers REPLICA with the secret, then
sends one sealed heartbeat and checks the router's sealed answer (so the sealing here is the
router's). Then the forgery, chosen by --forge:
  replay  the same sealed heartbeat frame again (as an on-path party that recorded it would);
  plain   an unsealed `Stored` for a made-up connection (no key: what anyone on the path can send);
  alter   the sealed heartbeat with one byte of its JSON changed.
Prints one JSON line: {"registered", "ack_ok", "closed_after_forgery"}. Bounded: 10 s.
"""
import argparse
import hashlib
import hmac
import json
import os
import socket
import struct
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--router", required=True)
p.add_argument("--replica", required=True)
p.add_argument("--secret-file", required=True)
p.add_argument("--forge", choices=["replay", "plain", "alter"], required=True)
a = p.parse_args()

secret = open(a.secret_file, "rb").read().rstrip()
VERSION = 9


def mac(role, first, second):
    m = hmac.new(secret, digestmod=hashlib.sha256)
    for part in ["ftnet-control-v1", role, first, second, a.replica]:
        b = part.encode()
        m.update(struct.pack(">I", len(b)) + b)
    return m


def frame(body, key=None, direction=None, count=None):
    raw = json.dumps(body).encode()
    if key is not None:
        raw += hmac.new(key, b"ftnet-frame-v1" + direction + struct.pack(">Q", count) + raw, hashlib.sha256).digest()
    return struct.pack(">I", len(raw)) + raw


class Conn:
    def __init__(self, sock):
        self.s, self.buf = sock, b""

    def read_frame(self):
        """The next frame's bytes, or None once the router closed the connection."""
        while True:
            if len(self.buf) >= 4:
                n = struct.unpack(">I", self.buf[:4])[0]
                if len(self.buf) >= 4 + n:
                    f, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return f
            try:
                chunk = self.s.recv(65536)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            self.buf += chunk


host, port = a.router.rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=10)
c = Conn(s)
nonce = os.urandom(16).hex()
s.sendall(frame({"type": "hello", "version": VERSION, "replica": a.replica, "host": "forge-test", "nonce": nonce}))
challenge = json.loads(c.read_frame())
assert challenge["type"] == "challenge", challenge
rn = challenge["nonce"]
s.sendall(frame({"type": "auth", "mac": mac("agent", rn, nonce).hexdigest()}))
welcome = json.loads(c.read_frame())
out = {"registered": welcome.get("type") == "welcome"}
if not out["registered"]:
    print(json.dumps(out | {"said": welcome}))
    sys.exit(1)
assert hmac.compare_digest(welcome["mac"], mac("router", nonce, rn).hexdigest()), "the router's MAC"
key = mac("session", nonce, rn).digest()
sent = 0
hb = frame({"type": "heartbeat", "seq": 1, "records": 0}, key, b"agent->router", sent)
sent += 1
s.sendall(hb)
# The router's frames after its Welcome are sealed: find its HeartbeatAck among them.
got, ack_ok = 0, False
deadline = time.time() + 5
s.settimeout(2)
while time.time() < deadline and not ack_ok:
    try:
        f = c.read_frame()
    except socket.timeout:
        break
    if f is None:
        break
    body, tag = f[:-32], f[-32:]
    want = hmac.new(key, b"ftnet-frame-v1" + b"router->agent" + struct.pack(">Q", got) + body, hashlib.sha256).digest()
    got += 1
    if not hmac.compare_digest(tag, want):
        out["bad_router_tag"] = True
        break
    ack_ok = json.loads(body).get("type") == "heartbeat_ack"
out["ack_ok"] = ack_ok
if a.forge == "replay":
    s.sendall(hb)
elif a.forge == "plain":
    key0 = {"client": "198.18.1.2", "cport": 40000, "vip": "198.19.0.1", "vport": 7000}
    s.sendall(frame({"type": "stored", "keys": [key0]}))
else:
    f = bytearray(frame({"type": "heartbeat", "seq": 2, "records": 0}, key, b"agent->router", sent))
    f[f.index(b'"seq": 2') + 7] = ord("3")
    s.sendall(bytes(f))
# The router closes the connection: read until it does (its remaining sealed frames are skipped).
closed = False
deadline = time.time() + 5
while time.time() < deadline:
    try:
        if c.read_frame() is None:
            closed = True
            break
    except socket.timeout:
        pass
out["closed_after_forgery"] = closed
print(json.dumps(out))
