#!/usr/bin/env python3
"""Order-sensitive Redis load for the e2e scenarios redis-load and redis-orderlost.

CONNS concurrent connections (asyncio, one process), each sending pipelines of 20 commands (and
single command groups) whose
final state depends on the order the server applies them in (APPEND, LPUSH/RPOP, SETRANGE,
HINCRBY, ZINCRBY, MULTI/EXEC blocks, EVAL) on a few keys every connection shares, until SECONDS
have passed (bounded: also at most MAX_PIPELINES pipelines per connection). Every reply is parsed
strictly as RESP and checked against the command that asked for it (a spliced reply — `QUEUED`
cut to `UED`, a reply of another command — is a protocol error). Prints one JSON line: commands,
replies, errors, the first errors, per-connection counts. Exit status 0 only with 0 errors.
"""
import argparse
import asyncio
import json
import random
import sys
import time

KEYS = 6
PIPELINE = 20
SCRIPT = "redis.call('APPEND', KEYS[1], ARGV[1]); return redis.call('STRLEN', KEYS[1])"


def enc(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class ProtocolError(Exception):
    pass


async def reply(r):
    """One RESP reply: ('+', str) | ('-', str) | (':', int) | ('$', bytes|None) | ('*', list|None)."""
    line = await r.readuntil(b"\r\n")
    t, body = line[:1], line[1:-2]
    if t == b"+":
        return ("+", body.decode("latin-1"))
    if t == b"-":
        return ("-", body.decode("latin-1"))
    if t == b":":
        try:
            return (":", int(body))
        except ValueError:
            raise ProtocolError("bad integer reply %r" % line[:80])
    if t == b"$":
        try:
            n = int(body)
        except ValueError:
            raise ProtocolError("bad bulk length %r" % line[:80])
        if n < 0:
            return ("$", None)
        data = await r.readexactly(n + 2)
        if data[-2:] != b"\r\n":
            raise ProtocolError("bulk not followed by CRLF")
        return ("$", data[:-2])
    if t == b"*":
        try:
            n = int(body)
        except ValueError:
            raise ProtocolError("bad array length %r" % line[:80])
        if n < 0:
            return ("*", None)
        return ("*", [await reply(r) for _ in range(n)])
    raise ProtocolError("unknown reply type %r" % line[:80])


def one(rnd):
    """A group of commands and the reply type each must get: [(bytes, check)]."""
    k = rnd.randrange(KEYS)
    v = "%d.%d;" % (rnd.randrange(1000), rnd.randrange(1000))
    c = rnd.randrange(8)
    isint = lambda x: x[0] == ":"
    bulk_or_nil = lambda x: x[0] == "$"
    ok = lambda x: x == ("+", "OK")
    queued = lambda x: x == ("+", "QUEUED")
    if c == 0:
        return [(enc("APPEND", "s:%d" % k, v), isint)]
    if c == 1:
        return [(enc("LPUSH", "l:%d" % k, v), isint), (enc("RPOP", "l:%d" % k), bulk_or_nil)]
    if c == 2:
        return [(enc("SETRANGE", "r:%d" % k, rnd.randrange(256), v), isint)]
    if c == 3:
        return [(enc("HINCRBY", "h:%d" % k, "f%d" % rnd.randrange(8), rnd.randrange(-5, 10)), isint)]
    if c == 4:
        # Scores stay integers (no float formatting differences).
        return [(enc("ZINCRBY", "z:%d" % k, rnd.randrange(1, 9), "m%d" % rnd.randrange(8)), bulk_or_nil)]
    if c == 5:
        arr3 = lambda x: x[0] == "*" and x[1] is not None and len(x[1]) == 3
        return [
            (enc("MULTI"), ok),
            (enc("APPEND", "s:%d" % k, v), queued),
            (enc("LPUSH", "l:%d" % ((k + 1) % KEYS), v), queued),
            (enc("HINCRBY", "h:%d" % k, "m", 1), queued),
            (enc("EXEC"), arr3),
        ]
    if c == 6:
        return [(enc("EVAL", SCRIPT, 1, "e:%d" % k, v), isint)]
    # A list that keeps a bounded length whatever the order: LPUSH then LTRIM.
    return [(enc("LPUSH", "t:%d" % k, v), isint), (enc("LTRIM", "t:%d" % k, 0, 49), ok)]


async def conn(i, args, stats, deadline):
    rnd = random.Random(args.seed * 1000 + i)
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(args.host, args.port), 10)
    except Exception as e:  # noqa: BLE001
        stats["errors"] += 1
        stats["first_errors"].append("conn %d: connect: %r" % (i, e))
        return
    done = 0
    try:
        for _ in range(args.max_pipelines):
            if time.monotonic() >= deadline:
                break
            # Pipelines of 20 and single command groups (one segment each:
            # many small input events for the sequencer).
            batch = list(one(rnd))
            if rnd.random() < args.pipelines:
                while len(batch) < PIPELINE:
                    batch.extend(one(rnd))
            w.write(b"".join(c for c, _ in batch))
            stats["commands"] += len(batch)
            for cmd, check in batch:
                try:
                    x = await asyncio.wait_for(reply(r), args.reply_timeout)
                except ProtocolError as e:
                    raise ProtocolError("%s (after %r)" % (e, cmd[:60]))
                stats["replies"] += 1
                if x[0] == "-" or not check(x):
                    stats["errors"] += 1
                    if len(stats["first_errors"]) < 10:
                        stats["first_errors"].append("conn %d: %r -> %r" % (i, cmd[:60], x))
            done += 1
    except Exception as e:  # noqa: BLE001
        stats["errors"] += 1
        if len(stats["first_errors"]) < 10:
            stats["first_errors"].append("conn %d: %s: %s" % (i, type(e).__name__, e))
    finally:
        stats["pipelines"].append(done)
        w.close()


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, default=6379)
    p.add_argument("--conns", type=int, default=32)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--max-pipelines", type=int, default=1_000_000)
    p.add_argument("--reply-timeout", type=float, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--pipelines", type=float, default=0.3, help="share of pipelines of 20 (the rest: single groups)")
    args = p.parse_args()
    stats = {"commands": 0, "replies": 0, "errors": 0, "first_errors": [], "pipelines": []}
    t0 = time.monotonic()
    deadline = t0 + args.seconds
    await asyncio.gather(*(conn(i, args, stats, deadline) for i in range(args.conns)))
    stats["seconds"] = round(time.monotonic() - t0, 2)
    stats["per_s"] = int(stats["commands"] / max(stats["seconds"], 0.001))
    print(json.dumps(stats))
    return 0 if stats["errors"] == 0 and stats["replies"] == stats["commands"] else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
