#!/usr/bin/env python3
"""A hostile client, run inside the client namespace (needs root there).

It opens an ordinary connection to the VIP (Redis protocol), reads its own
sequence numbers (TCP_REPAIR, as CRIU does), and then, with raw
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
import socket
import struct
import sys
import time

from rawpkt import csum, ip_header, tcp_segment


def send_raw(pkt: bytes, dst: str):
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
    s.sendto(pkt, (dst, 0))
    s.close()


TCP_REPAIR, TCP_REPAIR_QUEUE, TCP_QUEUE_SEQ = 19, 20, 21
TCP_RECV_QUEUE, TCP_SEND_QUEUE = 1, 2
TCP_REPAIR_ON, TCP_REPAIR_OFF, TCP_REPAIR_OFF_NO_WP = 1, 0, -1


def own_sequence_numbers(conn):
    """(SND.NXT, RCV.NXT) of an idle established socket, read with TCP_REPAIR
    (needs CAP_NET_ADMIN, which root in the client namespace has). The
    socket leaves repair mode at once, without a window probe."""
    conn.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, TCP_REPAIR_ON)
    try:
        conn.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, TCP_SEND_QUEUE)
        snd = struct.unpack("I", conn.getsockopt(socket.IPPROTO_TCP, TCP_QUEUE_SEQ, 4))[0]
        conn.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, TCP_RECV_QUEUE)
        rcv = struct.unpack("I", conn.getsockopt(socket.IPPROTO_TCP, TCP_QUEUE_SEQ, 4))[0]
    finally:
        try:
            conn.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, TCP_REPAIR_OFF_NO_WP)
        except OSError:
            conn.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, TCP_REPAIR_OFF)
    return snd, rcv


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
    conn = socket.create_connection((vip, port), timeout=5)
    me, lport = conn.getsockname()
    first = ping(conn, 5)
    print("connection %s:%d first PING: %s" % (me, lport, first), flush=True)
    if first != "+PONG":
        return 1
    time.sleep(0.2)  # its ACK of the reply is out: the socket is idle
    snd_nxt, rcv_nxt = own_sequence_numbers(conn)
    print("snd_nxt=%d rcv_nxt=%d" % (snd_nxt, rcv_nxt), flush=True)

    # 1. A segment 256 MiB ahead (sequencer stall).
    seg = tcp_segment(me, vip, lport, port, snd_nxt + (256 << 20), rcv_nxt, 0x18, 502, b"PING\r\n")
    send_raw(ip_header(me, vip, 6, len(seg), df=True) + seg, vip)
    print("sent: data segment 256 MiB ahead", flush=True)

    # 2. ICMP host unreachable from the client itself, quoting its own
    #    connection with replicas 2 and 3 as inner destination.
    for r in (r2, r3):
        inner_tcp = struct.pack("!HHI", lport, port, snd_nxt)
        inner = ip_header(me, r, 6, 20, df=True) + inner_tcp
        icmp = struct.pack("!BBHI", 3, 1, 0, 0) + inner
        icmp = icmp[:2] + struct.pack("!H", csum(icmp)) + icmp[4:]
        send_raw(ip_header(me, vip, 1, len(icmp), df=True) + icmp, vip)
        print("sent: ICMP host unreachable quoting %s:%d -> %s:%d" % (me, lport, r, port), flush=True)

    # 3. A blind RST, in the window but not at the exact sequence number.
    seg = tcp_segment(me, vip, lport, port, snd_nxt + 1000, 0, 0x04, 0)
    send_raw(ip_header(me, vip, 6, len(seg), df=True) + seg, vip)
    print("sent: RST at snd_nxt + 1000", flush=True)

    time.sleep(0.3)
    after = ping(conn, 5)
    print("same connection, PING after the attack: %s" % after, flush=True)
    conn.close()
    return 0 if after == "+PONG" else 1


if __name__ == "__main__":
    sys.exit(main())
