#!/usr/bin/env python3
"""Throughput during a join against the rest of the same run: reads
joinload.py's JSON (`rate`) and the window of the join (wall-clock ms: its
end, and the pause before it), prints commands/s inside the window and the
median of the 100 ms buckets outside it (skipping the first and last second
and 1 s around the window), and their ratio."""
import json
import statistics
import sys


def main():
    load, end_ms, pause_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    r = json.load(open(load))["rate"]
    start, w, counts = r["start_ms"], r["bucket_ms"], r["counts"]
    lo, hi = end_ms - pause_ms, end_ms
    inside, outside = [], []
    last = max((i for i, c in enumerate(counts) if c), default=0)
    for i, c in enumerate(counts):
        b0, b1 = start + i * w, start + (i + 1) * w
        if i < 1000 // w or i > last - 1000 // w:
            continue
        if b1 > lo and b0 < hi:
            inside.append(c)
        elif b1 <= lo - 1000 or b0 >= hi + 1000:
            outside.append(c)
    per_s = 1000 / w
    base = statistics.median(outside) * per_s if outside else 0
    during = (sum(inside) / len(inside)) * per_s if inside else 0
    ratio = during / base if base else 0
    print("throughput_during_join=%d cmd/s baseline=%d cmd/s ratio=%.2f window_buckets=%d"
          % (during, base, ratio, len(inside)))


if __name__ == "__main__":
    main()
