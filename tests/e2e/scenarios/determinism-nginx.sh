#!/usr/bin/env bash
# Deterministic replicas, nginx: three nginx replicas under the shim with `vote = "majority"`, so
# every response byte — its `Date:` header included — is compared across the replicas. Four
# keep-alive clients GET a small page every 10 ms for ~4 s, across several second boundaries. The
# router drops every 5th data segment to r3 (its test hook), so r3 serves many requests a
# retransmission timeout (200+ ms) after the others: on the kernel's clock its `Date:` then
# differs whenever a second boundary falls in between, and the vote takes it out (the control).
# nginx takes `Date:` from its cached time, updated from gettimeofday after each epoll_wait: under
# the shim that is the router's clock as of the same tick on every replica.
# Pass: every response 200 with a Date: header, at least three distinct Date values seen (the run
# crossed second boundaries), no replica taken out for its replies, no divergence counted. The control (the same
# with the router's ticks off, `--tick-ms 0`): a replica is taken out.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
export FTNET_E2E_SHIM=1
e2e_init determinism-nginx "$@"
[[ $N == 3 ]] || die "determinism-nginx runs with three replicas (a majority against one)"
[[ $FAULT == none ]] || die "determinism-nginx runs with FAULT=none"

PORT=8080
SECS=$(quick 3 4)
page=$(e2e_data "rand-1m" 1)
LOG=/run/ftnet/lab/$LAB/router.log
status_json() { lab status --name "$LAB" --json; }
divergences() { status_json | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["counters"]["divergences"])'; }
alive() { status_json | python3 -c 'import json,sys; print(sum(1 for r in json.load(sys.stdin)["status"]["services"][0]["replicas"] if r["alive"]))'; }

run_gets() { # run_gets TAG — the clients; their summary line in $T/TAG.out, exit status returned
	timeout 60 "$FTNET" lab exec --name "$LAB" client -- python3 "$T/get.py" "$VIP" "$PORT" "$SECS" >"$T/$1.out" 2>&1
}
lab_up --port "$PORT" --vote majority --fault-drop "$N:5" --failure-ms 3000 --server "$(nginx_server_cmd "$page")"
cat >"$T/get.py" <<'PY'
import http.client, sys, threading, time
host, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
dates, codes, errors = set(), {}, []
lock = threading.Lock()
def client():
    c = http.client.HTTPConnection(host, port, timeout=10)
    end = time.time() + secs
    while time.time() < end:
        try:
            c.request("GET", "/small.bin")
            r = c.getresponse()
            r.read()
            with lock:
                codes[r.status] = codes.get(r.status, 0) + 1
                d = r.getheader("Date")
                dates.add(d) if d else errors.append("no Date header")
        except Exception as e:
            with lock:
                errors.append(repr(e))
            c = http.client.HTTPConnection(host, port, timeout=10)
        time.sleep(0.01)
ts = [threading.Thread(target=client) for _ in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
print(f"codes={codes} dates={len(dates)} errors={len(errors)} first_errors={errors[:3]}")
sys.exit(0 if not errors and list(codes) == [200] and len(dates) >= 3 else 1)
PY
rc=0
run_gets get || rc=$?
say "clients: $(cat "$T/get.out"); voted $(lab_counter voted_bytes) bytes, $(lab_counter pace_updates) window update(s) to replicas the slowest held back"
grep -h "evicted\|diverged" "$LOG" | head -3 | sed 's/^/    /' || true
check_eq "every response 200 with a Date header, 3 or more Date values" 0 "$rc"
# (A lossy r3 may reset a connection as the clients close at the end — `evicted (reset)` from that
# connection alone; that is not the clock.)
check "no replica taken out for its replies" bash -c "! grep -q 'evicted (diverged)' '$LOG'"
check_eq "divergences counted" 0 "$(divergences)"
check_eq "replicas alive" 3 "$(alive)"

# The control: the servers on the kernel's clock. It reuses the lab's name, so the first half's
# router log is kept first (the evidence of a failure above, copied with the artifacts).
cp "$LOG" "$T/router-ticks.log" 2>/dev/null || true
for d in /run/ftnet/lab/"$LAB"/r*/; do
	[[ -f $d/server.log ]] && tail -c 200000 "$d/server.log" >"$T/ticks-$(basename "$d")-server.log"
done
timeout 120 "$FTNET" lab down --name "$LAB" >/dev/null 2>&1
lab_up --port "$PORT" --vote majority --fault-drop "$N:5" --failure-ms 3000 --tick-ms 0 --server "$(nginx_server_cmd "$page")"
run_gets control || true
sleep 0.5
n_alive=$(alive)
say "control (no ticks): $(cat "$T/control.out"); $(divergences) divergence(s), $n_alive replica(s) left"
check "control: without the router's clock a replica's Date: differs and it is taken out" test "$n_alive" -lt 3
e2e_finish
