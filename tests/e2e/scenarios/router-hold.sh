#!/usr/bin/env bash
# A router held long enough for its agents to give it up keeps every replica: Redis × 3 under
# the shim (lab --shim), the order-sensitive load of redis-load (tests/e2e/orderload.py, 32
# connections), and in the middle of it the router process is stopped (SIGSTOP) for 3 s, then
# continued (SIGCONT): a router host that was not scheduled, with no standby to take over.
#
#   client ns ── router ns (ftnet router, SIGSTOP 3 s) ── r1..r3 ns (agent → shim → redis)
#
# Each agent hears nothing for 2 s (4 × dead_after while the router's kernel still acknowledges)
# and gives the router up: it says so in its last frame (`Reconnecting`) and registers again at
# once. The router, running again, finds those sessions ended: the servers behind them still
# follow the order, and the agents are back on new sessions within milliseconds (their order
# reports bring them up to date from the router's log). Before, each ended session was ORDER
# LOST: two of the three replicas were taken out and told to end their servers.
# Pass: every agent says it comes back and registers again; no ORDER LOST, nobody declared down;
# 0 client errors; all three replicas serving with equal digests.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init router-hold "$@"
[[ $FAULT == none && $N == 3 ]] || die "router-hold runs with 3 replicas and no replica fault"

REDIS_PORT=6379
SECS=$(quick 10 14)
lab_up --port "$REDIS_PORT" --shim
d=/run/ftnet/lab/$LAB
t0=$(now_ms)
clients=()
for i in 1 2; do
	timeout $((SECS + 90)) "$FTNET" lab exec --name "$LAB" client -- \
		python3 "$E2E_DIR/orderload.py" --host "$VIP" --port "$REDIS_PORT" --conns 16 --seconds "$SECS" --seed "$((SEED * 10 + i))" \
		>"$T/load$i.json" 2>"$T/load$i.err" &
	clients+=($!)
done
sleep "$(random_pct 25 40)e-1"
pid=$(cat "$d/router.pid")
say "FAULT: the router (pid $pid) stops for 3 s (SIGSTOP) at $(($(now_ms) - t0)) ms into the load"
kill -STOP "$pid"
sleep 3
kill -CONT "$pid"
say "the router goes on (SIGCONT) at $(($(now_ms) - t0)) ms"
rcs=()
for p in "${clients[@]}"; do
	rc=0
	wait "$p" || rc=$?
	rcs+=("$rc")
done
say "load done in $(($(now_ms) - t0)) ms"
for i in 1 2; do
	say "client $i: $(head -c 2000 "$T/load$i.json") $(head -c 500 "$T/load$i.err")"
	check_eq "client $i exit status" 0 "${rcs[$((i - 1))]}"
	check_eq "client $i errors" 0 "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["errors"])' "$T/load$i.json" 2>/dev/null || echo unreadable)"
done
gave_up=0
for r in 1 2 3; do
	grep -q "fell silent" "$(replica_dir "$r")/agent.log" && gave_up=$((gave_up + 1))
done
say "agents that gave the router up: $gave_up of 3"
check "the hold made at least one agent give the router up" test "$gave_up" -ge 1
grep -E "registered again on a new session|ORDER LOST|declared down" "$d/router.log" | cut -c1-400 | while read -r l; do say "router: $l"; done
check "router log: an agent came back on a new session, its servers keeping their place" grep -q "registered again on a new session" "$d/router.log"
check_eq "no ORDER LOST" 0 "$(grep -c 'ORDER LOST' "$d/router.log" || true)"
check_eq "nobody declared down" 0 "$(grep -c 'declared down' "$d/router.log" || true)"
timeout 20 "$FTNET" lab status --name "$LAB" >"$T/status.txt" 2>&1 || true
for r in 1 2 3; do
	check "status: r$r alive" grep -Eq "^ +$(replica_ip "$r") +alive" "$T/status.txt"
done
settle 1 2 3
same_digests "after the hold" 1 2 3
e2e_finish
