"""Hand-built IPv4/TCP packets for the e2e attack scripts (attack_client.py, spoof.py)."""
import random
import socket
import struct


def csum(data: bytes) -> int:
    """RFC 1071 Internet checksum."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ip_header(src: str, dst: str, proto: int, payload_len: int, df: bool = False) -> bytes:
    h = struct.pack(
        "!BBHHHBBH4s4s",
        0x45, 0, 20 + payload_len, random.randrange(1, 65535), 0x4000 if df else 0, 64, proto, 0,
        socket.inet_aton(src), socket.inet_aton(dst),
    )
    return h[:10] + struct.pack("!H", csum(h)) + h[12:]


def tcp_segment(src: str, dst: str, sport: int, dport: int, seq: int, ack: int, flags: int,
                window: int = 65535, payload: bytes = b"") -> bytes:
    """A TCP segment without options, checksum over the RFC 9293 pseudo-header."""
    h = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                    5 << 4, flags, window, 0, 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(h) + len(payload))
    return h[:16] + struct.pack("!H", csum(pseudo + h + payload)) + h[18:] + payload
