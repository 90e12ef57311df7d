#!/usr/bin/env bash
# A stateful group heals with the group's state (issue 15 (a)): Redis × 3 under the shim, 20
# long-lived connections of writers (INCR/APPEND/LPUSH, every reply checked) plus a new short
# connection every 100 ms (joinload.py), ~14 s.
#
#  client ──veth── router (ftnet, sequencer) ──veth── r1, r2, r3 (redis under `ftnet run`)
#  (joinload)                                         the victim: killed (kill -9), then started
#                                                     again fresh and EMPTY (`ftnet lab restart`)
#
# ~3 s in the victim's Redis is killed: the router takes it out. ~2 s later a fresh, empty Redis is
# started there; its shim connects to the agent, and the replica JOINS with no operator action:
# the service's input pauses (zero window), a serving replica's agent checkpoints its Redis (SAVE)
# at the paused input event, the joiner's agent restores it (DEBUG RELOAD), the digests must be
# equal, and the router adds the joiner to every open connection (a TCP connection of its own in
# the client's name, where the client's stream stands).
# Pass: 0 client errors, every counter exact; the router logs the join (one line); afterwards
# DEBUG DIGEST is equal on all three (the joiner kept up with the 20 connections it joined), and
# the joiner is in new connections. Figure: kill → serving again, and the pause clients saw.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init join "$@"
[[ $FAULT == kill ]] || die "join runs with a server kill"

REDIS_PORT=6379
lab_up --port "$REDIS_PORT" --shim --failure-ms 1000
LOG=/run/ftnet/lab/$LAB/router.log
VADDR=$(replica_ip "$VICTIM")
state_of() { # state_of ADDR → "state alive connections"
	lab status --name "$LAB" --json | python3 -c "import json,sys; d=json.load(sys.stdin); r=[r for r in d['status']['services'][0]['replicas'] if r['addr'] == sys.argv[1]][0]; print(f\"{r['state']} {r['alive']} {r['connections']}\")" "$1"
}

DURATION=14
timeout 180 "$FTNET" lab exec --name "$LAB" client -- \
	python3 "$E2E_DIR/joinload.py" --host "$VIP" --port "$REDIS_PORT" --conns 20 --duration "$DURATION" \
	--short-ms 100 >"$T/load.json" 2>"$T/load.err" &
load=$!

sleep 3
check "lab kill r$VICTIM" lab kill --name "$LAB" "$VICTIM"
down_line() { grep -m1 "replica $VADDR declared down" "$LOG"; }
check "router declared r$VICTIM down" wait_for 5 down_line
sleep 2
t_restart=$(now_ms)
check "lab restart r$VICTIM (fresh, empty)" lab restart --name "$LAB" "$VICTIM"
joined_line() { grep -m1 "replica $VADDR JOINED" "$LOG"; }
check "r$VICTIM joined by itself with the group's state" wait_for 20 joined_line
line=$(joined_line || true)
say "router: ${line:-<no line>}"
grep -E "could NOT join|joins \(join" "$LOG" | head -5 | while read -r l; do say "router: $l"; done
if [[ -n $line ]]; then
	joined_ms=$(python3 -c 'import sys,datetime; ts=sys.argv[1].split()[0]; print(int(datetime.datetime.fromisoformat(ts.replace("Z","+00:00")).timestamp()*1000))' "$line")
	pause=$(sed -E 's/.*paused ([0-9]+) ms.*/\1/' <<<"$line")
	say "restart → serving: $((joined_ms - t_restart)) ms; input paused $pause ms"
	echo "join-kill restart_to_serving_ms=$((joined_ms - t_restart)) pause_ms=$pause" >"$T/figure.txt"
fi

rc=0
wait "$load" || rc=$?
say "load: $(cat "$T/load.json" 2>/dev/null)"
[[ -s $T/load.err ]] && say "load stderr: $(head -c 1000 "$T/load.err")"
check_eq "writers: exit status (0 errors, every counter exact)" 0 "$rc"
errors=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['errors'])" "$T/load.json" 2>/dev/null || echo "?")
check_eq "client errors" 0 "$errors"

all=(1 2 3)
settle "${all[@]}"
same_digests "after the join" "${all[@]}"
# New connections include the joiner.
busy() { in_ns client redis-cli -h "$VIP" -p "$REDIS_PORT" INCR probe >/dev/null && [[ $(state_of "$VADDR") == serving\ True* ]]; }
check "r$VICTIM serving and alive" wait_for 5 busy
say "r$VICTIM: $(state_of "$VADDR")"
check_eq "r$VICTIM joined once" 1 "$(grep -c "replica $VADDR JOINED" "$LOG")"
check "no join failed" bash -c "! grep -q 'could NOT join' '$LOG'"
e2e_finish
