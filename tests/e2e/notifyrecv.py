#!/usr/bin/env python3
"""A stand-in for systemd's notification socket (sd_notify(3)): binds a Unix datagram socket at
PATH and appends every datagram it receives to LOG as one line, "<epoch ms> <assignments>" with
the datagram's newlines shown as " | ". Runs until SIGTERM or --max seconds."""
import argparse
import os
import signal
import socket
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("path")
p.add_argument("log")
p.add_argument("--max", type=float, default=300)
a = p.parse_args()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
if os.path.exists(a.path):
    os.unlink(a.path)
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(a.path)
end = time.time() + a.max
with open(a.log, "a", buffering=1) as out:
    while time.time() < end:
        s.settimeout(max(0.1, end - time.time()))
        try:
            msg = s.recv(4096)
        except socket.timeout:
            continue
        text = msg.decode("utf-8", "replace").strip("\n").replace("\n", " | ")
        out.write(f"{int(time.time() * 1000)} {text}\n")
