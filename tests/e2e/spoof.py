#!/usr/bin/env python3
"""Packets a client forges with a replica's source address (raw IP packets built here; no scapy).

  spoof.py rst  --client C --vip V --port P --replica R [--tries N]
      For each try: a SYN from C:<fresh port> to V:P (a handshake this script controls), and
      right behind it a RST|ACK from R:P to C:<that port> answering it, as replica R refusing
      the connection would.
  spoof.py icmp --client C --replica R --port P --cport CP --seq S
      An ICMP destination unreachable (host unreachable) from R to C quoting the segment
      C:CP -> R:P with sequence S: replica R's host reporting itself unreachable for the
      connection the client holds on CP.
  spoof.py udp  --src A --dst B --port P
      One UDP datagram from A to B:P (a spoofed source forwarded on, or not).

Every packet is handed to the client's link as an Ethernet frame for the gateway (--gw, the
router), through a packet socket: a datagram addressed to the client itself (what a replica
would send it) would otherwise never leave the client's own stack. Sums are computed here
(RFC 1071).
"""
import argparse
import random
import socket
import struct
import time

from rawpkt import csum, ip_header, tcp_segment


class Link:
    """A packet socket on the interface that leads to the gateway, sending to its MAC."""

    def __init__(self, gw: str):
        self.gw = gw
        self.dev, self.mac = self.resolve()
        self.s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))

    def resolve(self):
        for _ in range(20):
            with open("/proc/net/arp") as f:
                for line in f.read().splitlines()[1:]:
                    w = line.split()
                    if w[0] == self.gw and w[3] != "00:00:00:00:00:00":
                        return w[5], bytes.fromhex(w[3].replace(":", ""))
            # Make the kernel resolve it.
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"", (self.gw, 9))
            time.sleep(0.05)
        raise SystemExit(f"no ARP entry for the gateway {self.gw}")

    def send(self, src: str, dst: str, proto: int, payload: bytes) -> None:
        pkt = ip_header(src, dst, proto, len(payload)) + payload
        self.s.sendto(pkt, (self.dev, 0x0800, 0, 0, self.mac))


def rst(a) -> None:
    s = Link(a.gw)
    for _ in range(a.tries):
        cport = random.randrange(20000, 30000)
        isn = random.getrandbits(32)
        syn = tcp_segment(a.client, a.vip, cport, a.port, isn, 0, 0x02)
        # RST|ACK acknowledging the SYN, as a closed port answers (RFC 9293 §3.10.7.1).
        reset = tcp_segment(a.replica, a.client, a.port, cport, 0, (isn + 1) & 0xFFFFFFFF, 0x14)
        s.send(a.client, a.vip, 6, syn)
        s.send(a.replica, a.client, 6, reset)
        print(f"SYN {a.client}:{cport} -> {a.vip}:{a.port}, then RST from {a.replica}:{a.port}")
        time.sleep(0.2)


def icmp(a) -> None:
    s = Link(a.gw)
    # The quoted datagram: the IP header of the segment the router sent the replica, and the
    # first 8 bytes of its TCP header (RFC 792).
    quoted_tcp = tcp_segment(a.client, a.replica, a.cport, a.port, a.seq, 0, 0x18)[:8]
    quoted = ip_header(a.client, a.replica, 6, 20) + quoted_tcp
    body = struct.pack("!BBHI", 3, 1, 0, 0) + quoted
    body = body[:2] + struct.pack("!H", csum(body)) + body[4:]
    for _ in range(a.tries):
        s.send(a.replica, a.client, 1, body)
        print(f"ICMP host unreachable from {a.replica} quoting {a.client}:{a.cport} -> {a.replica}:{a.port}")
        time.sleep(0.1)


def udp(a) -> None:
    s = Link(a.gw)
    data = b"spoofed"
    u = struct.pack("!HHHH", 40000, a.port, 8 + len(data), 0) + data
    s.send(a.src, a.dst, 17, u)
    print(f"UDP {a.src} -> {a.dst}:{a.port}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--gw", default="198.18.1.1", help="the router's address on the client's link")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rst")
    r.add_argument("--client", required=True)
    r.add_argument("--vip", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--replica", required=True)
    r.add_argument("--tries", type=int, default=3)
    i = sub.add_parser("icmp")
    i.add_argument("--client", required=True)
    i.add_argument("--replica", required=True)
    i.add_argument("--port", type=int, required=True)
    i.add_argument("--cport", type=int, required=True)
    i.add_argument("--seq", type=int, default=0)
    i.add_argument("--tries", type=int, default=2)
    u = sub.add_parser("udp")
    u.add_argument("--src", required=True)
    u.add_argument("--dst", required=True)
    u.add_argument("--port", type=int, required=True)
    a = p.parse_args()
    {"rst": rst, "icmp": icmp, "udp": udp}[a.cmd](a)


if __name__ == "__main__":
    main()
