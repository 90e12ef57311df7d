#!/usr/bin/env python3
"""A hostile client, run inside the client namespace (needs root there).

It opens an ordinary connection to the VIP (Redis protocol), learns its own
sequence numbers by watching its own packets (AF_PACKET), and then, with raw
sockets (IP_HDRINCL, no scapy), sends what issue 13 item 3 lists against it:

  far      a data segment 256 MiB ahead of its stream (inside ±2^30, outside
           every replica's window): must get no input number (sequencer stall);
  icmp     two ICMP host-unreachable messages from the client itself, quoting
           its own connection with replica 2 and replica 3 as inner
           destination: must mark no replica down;
  rst      a blind RST 1000 bytes ahead of the client's sequence number: must
           not end the connection (RFC 5961 §3.2).

Then it sends PING on the same connection and expects +PONG within 5 s.
Prints one line per step; exit status 0 if the connection still works.

usage: attack_client.py VIP PORT R2 R3
"""
import os
import select
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003


def csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ip_header(src: str, dst: str, proto: int, payload_len: int) -> bytes:
    h = struct.pack(
        "!BBHHHBBH4s4s",
        0x45, 0, 20 + payload_len, os.getpid() & 0xFFFF, 0x4000, 64, proto, 0,
        socket.inet_aton(src), socket.inet_aton(dst),
    )
    return h[:10] + struct.pack("!H", csum(h)) + h[12:]


def tcp_segment(src, dst, sport, dport, seq, ack, flags, window, payload=b""):
    h = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                    5 << 4, flags, window, 0, 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(h) + len(payload))
    c = csum(pseudo + h + payload)
    return h[:16] + struct.pack("!H", c) + h[18:] + payload


def send_raw(pkt: bytes, dst: str):
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
    s.sendto(pkt, (dst, 0))
    s.close()


class Watch:
    """Our own connection's SND.NXT and RCV.NXT, from its packets."""

    def __init__(self):
        self.s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.snd_nxt = None
        self.rcv_nxt = None

    def drain(self, vip, port, lport, secs):
        end = time.time() + secs
        while time.time() < end:
            r, _, _ = select.select([self.s], [], [], max(0.0, end - time.time()))
            if not r:
                break
            frame = self.s.recv(65535)
            if len(frame) < 14 + 20 or struct.unpack("!H", frame[12:14])[0] != 0x0800:
                continue
            ip = frame[14:]
            ihl = (ip[0] & 0x0F) * 4
            if ip[9] != 6:
                continue
            total = struct.unpack("!H", ip[2:4])[0]
            src, dst = socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])
            t = ip[ihl:total]
            sp, dp, seq, ack, off, fl = struct.unpack("!HHIIBB", t[:14])
            plen = len(t) - (off >> 4) * 4
            end_seq = (seq + plen + (1 if fl & 0x03 else 0)) & 0xFFFFFFFF  # SYN, FIN count one
            if dst == vip and dp == port and sp == lport:
                if self.snd_nxt is None or ((end_seq - self.snd_nxt) & 0xFFFFFFFF) < 1 << 31:
                    self.snd_nxt = end_seq
            elif src == vip and sp == port and dp == lport:
                if self.rcv_nxt is None or ((end_seq - self.rcv_nxt) & 0xFFFFFFFF) < 1 << 31:
                    self.rcv_nxt = end_seq


def ping(conn, timeout):
    conn.settimeout(timeout)
    conn.sendall(b"PING\r\n")
    got = b""
    try:
        while not got.endswith(b"\r\n"):
            b = conn.recv(100)
            if not b:
                return "closed"
            got += b
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return "error %s" % e
    return got.decode(errors="replace").strip()


def main():
    vip, port, r2, r3 = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    w = Watch()
    conn = socket.create_connection((vip, port), timeout=5)
    me, lport = conn.getsockname()
    first = ping(conn, 5)
    print("connection %s:%d first PING: %s" % (me, lport, first), flush=True)
    if first != "+PONG":
        return 1
    w.drain(vip, port, lport, 0.5)
    if w.snd_nxt is None or w.rcv_nxt is None:
        print("could not learn the connection's sequence numbers", flush=True)
        return 1
    print("snd_nxt=%d rcv_nxt=%d" % (w.snd_nxt, w.rcv_nxt), flush=True)

    # 1. A segment 256 MiB ahead (sequencer stall).
    seg = tcp_segment(me, vip, lport, port, w.snd_nxt + (256 << 20), w.rcv_nxt, 0x18, 502, b"PING\r\n")
    send_raw(ip_header(me, vip, 6, len(seg)) + seg, vip)
    print("sent: data segment 256 MiB ahead", flush=True)

    # 2. ICMP host unreachable from the client itself, quoting its own
    #    connection with replicas 2 and 3 as inner destination.
    for r in (r2, r3):
        inner_tcp = struct.pack("!HHI", lport, port, w.snd_nxt)
        inner = ip_header(me, r, 6, 20) + inner_tcp
        icmp = struct.pack("!BBHI", 3, 1, 0, 0) + inner
        icmp = icmp[:2] + struct.pack("!H", csum(icmp)) + icmp[4:]
        send_raw(ip_header(me, vip, 1, len(icmp)) + icmp, vip)
        print("sent: ICMP host unreachable quoting %s:%d -> %s:%d" % (me, lport, r, port), flush=True)

    # 3. A blind RST, in the window but not at the exact sequence number.
    seg = tcp_segment(me, vip, lport, port, w.snd_nxt + 1000, 0, 0x04, 0)
    send_raw(ip_header(me, vip, 6, len(seg)) + seg, vip)
    print("sent: RST at snd_nxt + 1000", flush=True)

    time.sleep(0.3)
    after = ping(conn, 5)
    print("same connection, PING after the attack: %s" % after, flush=True)
    conn.close()
    return 0 if after == "+PONG" else 1


if __name__ == "__main__":
    sys.exit(main())
