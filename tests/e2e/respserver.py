#!/usr/bin/env python3
"""A small Redis-protocol server on one asyncio event loop with a chosen selector
(poll, select or epoll): the shape of a single-threaded asyncio service, for the
end-to-end tests of the determinism shim (`ftnet run`) with each readiness call.
redis-benchmark and redis-cli are its clients.

Commands: PING, ECHO, SET, GET, INCR, APPEND, LPUSH, LLEN, DEL, DBSIZE, FLUSHALL,
CONFIG GET (what redis-benchmark asks first), COMMAND, INFO, DEBUG DIGEST (a digest of
the whole state, independent of how it was built; 40 zeros when empty, as Redis).
Replies to APPEND/INCR/LPUSH depend on the order of the clients' commands across
connections, and so does the final state: replicas stay identical only if they
all see the same order.

Usage: respserver.py --port PORT [--selector poll|select|epoll]
"""

import argparse
import asyncio
import hashlib
import selectors
import sys

DB = {}  # key (bytes) -> bytes | list[bytes]
STATS = {"commands": 0, "connections": 0}


class ProtocolError(Exception):
    pass


def parse(buf):
    """One command from the front of buf: (args, bytes used), or (None, 0) if incomplete."""
    if not buf:
        return None, 0
    if buf[:1] != b"*":  # inline command
        end = buf.find(b"\r\n")
        if end < 0:
            if len(buf) > 65536:
                raise ProtocolError("inline command too long")
            return None, 0
        return bytes(buf[:end]).split(), end + 2
    end = buf.find(b"\r\n")
    if end < 0:
        return None, 0
    try:
        n = int(buf[1:end])
    except ValueError:
        raise ProtocolError("bad multibulk length")
    if not 0 <= n <= 1024 * 1024:
        raise ProtocolError("bad multibulk length")
    pos, args = end + 2, []
    for _ in range(n):
        end = buf.find(b"\r\n", pos)
        if end < 0:
            return None, 0
        if buf[pos : pos + 1] != b"$":
            raise ProtocolError("expected '$'")
        try:
            size = int(buf[pos + 1 : end])
        except ValueError:
            raise ProtocolError("bad bulk length")
        if not 0 <= size <= 512 * 1024 * 1024:
            raise ProtocolError("bad bulk length")
        start = end + 2
        if len(buf) < start + size + 2:
            return None, 0
        args.append(bytes(buf[start : start + size]))
        pos = start + size + 2
    return args, pos


def bulk(v):
    return b"$-1\r\n" if v is None else b"$%d\r\n%s\r\n" % (len(v), v)


def integer(i):
    return b":%d\r\n" % i


def array(items):
    return b"*%d\r\n" % len(items) + b"".join(bulk(x) for x in items)


def digest():
    if not DB:
        return b"0" * 40
    h = hashlib.sha1()
    for k in sorted(DB):
        v = DB[k]
        h.update(b"%d:%s=" % (len(k), k))
        if isinstance(v, list):
            h.update(b"L%d:" % len(v) + b"\x00".join(v))
        else:
            h.update(b"S%d:%s" % (len(v), v))
        h.update(b"\n")
    return h.hexdigest().encode()


def execute(args):
    STATS["commands"] += 1
    if not args:
        return b""
    cmd = args[0].upper()
    try:
        if cmd == b"PING":
            return b"+PONG\r\n" if len(args) == 1 else bulk(args[1])
        if cmd == b"ECHO":
            return bulk(args[1])
        if cmd == b"SET":
            DB[args[1]] = args[2]
            return b"+OK\r\n"
        if cmd == b"GET":
            v = DB.get(args[1])
            if isinstance(v, list):
                return b"-WRONGTYPE\r\n"
            return bulk(v)
        if cmd == b"INCR":
            v = int(DB.get(args[1], b"0")) + 1
            DB[args[1]] = b"%d" % v
            return integer(v)
        if cmd == b"APPEND":
            v = DB.get(args[1], b"") + args[2]
            DB[args[1]] = v
            return integer(len(v))
        if cmd == b"LPUSH":
            lst = DB.setdefault(args[1], [])
            for x in args[2:]:
                lst.insert(0, x)
            return integer(len(lst))
        if cmd == b"LLEN":
            return integer(len(DB.get(args[1], [])))
        if cmd == b"DEL":
            return integer(sum(DB.pop(k, None) is not None for k in args[1:]))
        if cmd == b"DBSIZE":
            return integer(len(DB))
        if cmd == b"FLUSHALL":
            DB.clear()
            return b"+OK\r\n"
        if cmd == b"CONFIG" and len(args) >= 3 and args[1].upper() == b"GET":
            known = {b"save": b"", b"appendonly": b"no"}
            return array([args[2], known.get(args[2].lower(), b"")])
        if cmd == b"COMMAND":
            return b"*0\r\n"
        if cmd == b"INFO":
            text = (
                b"# Stats\r\ntotal_commands_processed:%d\r\ntotal_connections_received:%d\r\n"
                % (STATS["commands"], STATS["connections"])
            )
            return bulk(text)
        if cmd == b"DEBUG" and len(args) >= 2 and args[1].upper() == b"DIGEST":
            return b"+" + digest() + b"\r\n"
        return b"-ERR unknown command '%s'\r\n" % cmd
    except (IndexError, ValueError):
        return b"-ERR wrong arguments for '%s'\r\n" % cmd


class Conn(asyncio.Protocol):
    def connection_made(self, transport):
        STATS["connections"] += 1
        self.transport = transport
        self.buf = bytearray()

    def data_received(self, data):
        self.buf += data
        out = []
        try:
            while True:
                args, used = parse(self.buf)
                if args is None:
                    break
                del self.buf[:used]
                out.append(execute(args))
        except ProtocolError as e:
            out.append(b"-ERR Protocol error: %s\r\n" % str(e).encode())
            self.transport.write(b"".join(out))
            self.transport.close()
            return
        if out:
            self.transport.write(b"".join(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--selector", choices=["poll", "select", "epoll"], default="poll")
    a = ap.parse_args()
    sel = {
        "poll": selectors.PollSelector,
        "select": selectors.SelectSelector,
        "epoll": selectors.EpollSelector,
    }[a.selector]()
    loop = asyncio.SelectorEventLoop(sel)
    asyncio.set_event_loop(loop)
    server = loop.run_until_complete(
        loop.create_server(Conn, host="0.0.0.0", port=a.port, backlog=512)
    )
    print(f"respserver: port {a.port}, asyncio on {type(sel).__name__}", file=sys.stderr, flush=True)
    try:
        loop.run_forever()
    finally:
        server.close()


if __name__ == "__main__":
    main()
