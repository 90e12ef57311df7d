#!/usr/bin/env python3
"""Duplicate ACKs a client got against the segments it sent, from `tcpdump -S -nn -tt -r` output.

Reads tcpdump's text (absolute sequence numbers) of one TCP connection as the client saw it: its
own segments ("Out", or from --client) and the server's ("In"). A duplicate ACK is a segment of
the server's with no payload, no SYN/FIN/RST, the same ACK number and window as the one before
it. One TCP receiver sends at most one for each segment it receives beyond what it holds, so
at an ACK number A the client gets no more duplicate ACKs than it sent data segments starting
beyond A (a GSO packet counted as one, each transmission counted), save a few after it fell
silent (`--idle-allowance`).
Prints one JSON object: the worst excess over all periods and the totals. Exit status 0.
"""
import argparse
import json
import re
import sys

LINE = re.compile(r"^(\d+\.\d+) .*?IP (\S+) > (\S+): Flags \[([^\]]*)\](.*)$")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--client", required=True, help="the client's address.port as tcpdump prints it")
    ap.add_argument("--idle-allowance", type=int, default=3)
    a = ap.parse_args()
    ack = win = None
    dups = 0
    starts = []  # the client's data segments' first sequence numbers, in the order sent
    worst = (0, None)
    total_dups = periods = 0

    def beyond(a):
        return sum(1 for x in starts if 0 < (x - a) % (1 << 32) < (1 << 31))

    for line in sys.stdin:
        m = LINE.match(line.strip())
        if not m:
            continue
        t, src, _dst, flags, rest = m.groups()
        length = int((re.search(r"length (\d+)", rest) or [0, 0])[1])
        if src == a.client:
            sm = re.search(r"seq (\d+):", rest)
            if length > 0 and sm:
                starts.append(int(sm[1]))
            continue
        am = re.search(r"ack (\d+), win (\d+)", rest)
        if not am:
            continue
        this = (int(am[1]), int(am[2]))
        if this[0] != ack:
            ack, win, dups = this[0], this[1], 0
            periods += 1
            continue
        if length == 0 and not set(flags) & set("SFR") and this[1] == win:
            dups += 1
            total_dups += 1
            excess = dups - beyond(ack) - a.idle_allowance
            if excess > worst[0]:
                worst = (excess, float(t))
        win = this[1]
    print(json.dumps({"worst_excess": worst[0], "worst_at": worst[1], "duplicate_acks": total_dups,
                      "client_segments": len(starts), "ack_moves": periods}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
