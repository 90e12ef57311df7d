#!/usr/bin/env python3
"""Copy stdin to stdout at no more than RATE MB/s (0 = unlimited).

The e2e tests cap their bulk transfers so that a transfer lasts long enough for a fault to land
inside it even on a fast path; a replica failure during a stream is what they test.
"""
import os
import sys
import time

rate = float(sys.argv[1]) * 1048576 if len(sys.argv) > 1 else 0.0
t0 = time.monotonic()
done = 0
while True:
    buf = os.read(0, 65536)
    if not buf:
        break
    view = memoryview(buf)
    while view:
        n = os.write(1, view)
        view = view[n:]
    done += len(buf)
    if rate > 0:
        ahead = done / rate - (time.monotonic() - t0)
        if ahead > 0:
            time.sleep(ahead)
