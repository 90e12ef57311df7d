#!/usr/bin/env bash
# A replica cut off from the group comes back by itself with the group's state (issue 15 (b)):
# Redis × 3 under `ftnet run --supervise`, 20 long-lived connections of writers (INCR/APPEND/LPUSH,
# every reply checked) plus a new short connection every 100 ms (joinload.py).
#
#  client ──veth── router (ftnet, sequencer) ──veth── r1, r2, r3 (redis under `ftnet run --supervise`)
#  (joinload)                                         ╳ the victim's link, cut for 5 s
#
# The victim's link is cut for 5 s while the writes go on: its agent falls silent, the router
# declares its host lost and takes it out. The link comes back with a server that missed every
# write since (stale). Its agent registers again with that server following the order; the router
# sees the replica out of service while the others serve and tells the agent to end the stale
# server; its supervisor starts a fresh one, which joins with the group's state (checkpoint,
# restore, equal digests) and into every open connection — no operator action anywhere.
# Pass: the router logs the stale server and the join (one line each); 0 client errors, every
# counter exact; DEBUG DIGEST equal on all three afterwards; the victim serves new connections.
# Figure: link back → serving again.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init join-cut "$@"
[[ $FAULT == cut && $N == 3 ]] || die "join-cut runs with 3 replicas and a link cut"
CUT_S=5
REDIS_PORT=6379
lab_up --port "$REDIS_PORT" --supervise --failure-ms 1000
LOG=/run/ftnet/lab/$LAB/router.log
VADDR=$(replica_ip "$VICTIM")

timeout 300 "$FTNET" lab exec --name "$LAB" client -- \
	python3 "$E2E_DIR/joinload.py" --host "$VIP" --port "$REDIS_PORT" --conns 20 --duration 22 \
	--short-ms 100 >"$T/load.json" 2>"$T/load.err" &
load=$!

sleep 3
lab cut --name "$LAB" "$VICTIM" >"$T/fault.out" 2>&1
say "FAULT injected: lab cut r$VICTIM under writes"
check "router declared r$VICTIM's host lost" wait_for 5 bash -c "grep -q 'host lost.*replica=$VADDR\|replica=$VADDR.*host lost' '$LOG'"
sleep "$CUT_S"
t_heal=$(now_ms)
lab heal --name "$LAB" "$VICTIM" >>"$T/fault.out" 2>&1
say "r$VICTIM's link restored"
stale_server_rejoins
if [[ -n $joined_ms ]]; then
	say "r$VICTIM: link back → serving $((joined_ms - t_heal)) ms; input paused $pause ms"
	echo "r$VICTIM heal_to_serving_ms=$((joined_ms - t_heal)) pause_ms=$pause" >"$T/figure.txt"
fi

joinload_finish "$load"
if [[ -n ${joined_ms:-} && -n ${pause:-} ]]; then
	rate=$(python3 "$E2E_DIR/joinrate.py" "$T/load.json" "$joined_ms" "$pause" 2>&1 || true)
	say "r$VICTIM join: $rate"
	echo "r$VICTIM $rate" >>"$T/figure.txt"
fi

rejoined_serves
e2e_finish
