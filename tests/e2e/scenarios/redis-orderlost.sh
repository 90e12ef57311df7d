#!/usr/bin/env bash
# A server that loses the router's order leaves the group: Redis × N under the shim (lab --shim),
# the order-sensitive load of redis-load (tests/e2e/orderload.py, 32 connections, SECS seconds),
# and at a random point inside it the victim's agent is killed with SIGKILL, so its shim loses
# the agent and its server can no longer get the order.
#
#   client ns ── router ns (ftnet router) ── r1..rN ns (agent → shim → redis); r<victim>'s agent
#                                                        killed -9 mid-load
#
# Pass: the router takes the victim out at once, saying why (router.log: ORDER LOST for its
# address; `ftnet status` shows it evicted), the clients get no error, the survivors' DEBUG
# DIGESTs are equal and not empty, and the victim's shim says it lost the order.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init redis-orderlost "$@"
[[ $FAULT == kill ]] || die "redis-orderlost kills an agent: run it with N>=2 kill"

REDIS_PORT=6379
SECS=$(quick 8 12)
lab_up --port "$REDIS_PORT" --shim
vip_of_victim=$(replica_ip "$VICTIM")
t0=$(now_ms)
clients=()
for i in 1 2; do
	timeout $((SECS + 90)) "$FTNET" lab exec --name "$LAB" client -- \
		python3 "$E2E_DIR/orderload.py" --host "$VIP" --port "$REDIS_PORT" --conns 16 --seconds "$SECS" --seed "$((SEED * 10 + i))" \
		>"$T/load$i.json" 2>"$T/load$i.err" &
	clients+=($!)
done
sleep "$(random_pct 20 50)e-1"
pid=$(cat "$(replica_dir "$VICTIM")/agent.pid")
say "killing r$VICTIM's agent (pid $pid) with SIGKILL at $(($(now_ms) - t0)) ms into the load"
kill -9 "$pid"
t_kill=$(date -u +%H:%M:%S.%3N)
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
d=/run/ftnet/lab/$LAB
line=$(grep -m1 "ORDER LOST.*$vip_of_victim\|$vip_of_victim.*ORDER LOST" "$d/router.log" || true)
say "killed at $t_kill; router: ${line:-(nothing)}"
check "router log: r$VICTIM taken out because its server lost the order" test -n "$line"
check "router log: r$VICTIM declared down (order_lost)" grep -q "replica $vip_of_victim declared down (order_lost)" "$d/router.log"
timeout 20 "$FTNET" lab status --name "$LAB" >"$T/status.txt" 2>&1 || true
cat "$T/status.txt" | grep -E "^ +198\.18\." | head -n "$N" | while read -r l; do say "status: $l"; done
check "status: r$VICTIM down, the order lost" grep -Eq "^ +$vip_of_victim +down: order lost, [0-9.]+ s" "$T/status.txt"
for r in "${SURVIVORS[@]}"; do
	check "status: r$r alive" grep -Eq "^ +$(replica_ip "$r") +alive" "$T/status.txt"
done
check "r$VICTIM: its shim says it lost the order" grep -q "ORDER LOST" "$(replica_dir "$VICTIM")/server.log"
settle "${SURVIVORS[@]}"
same_digests "survivors" "${SURVIVORS[@]}"
e2e_finish
