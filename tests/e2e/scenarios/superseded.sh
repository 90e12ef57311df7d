#!/usr/bin/env bash
# A router that was stalled, superseded and came back starts over: it never acts on what it knew.
#
#  client ──veth── router  (master) ──┬── r1, r2, r3 (redis under `ftnet run --supervise`)
#  (joinload)      router2 (backup) ──┘   two routers under keepalived (lab --ha), sequencer
#
# Redis × 3 under the shim, 10 long-lived writers plus a short connection every 100 ms. The
# master's host stops being scheduled for 2 s (`lab stall-router`: SIGSTOP of its ftnet and
# keepalived): the backup takes over when the adverts stop, rebuilds from the agents' records and
# numbers the input order on. The stalled router then goes on with what it knew; whichever of the
# two holds the addresses afterwards, the other is killed (`lab kill-router` if needed), so that
# the router that was stalled serves again. Its table, its input order and its verdicts (agents it
# took for lost while it was stopped) are stale: the first agent that registers reports input
# events it never numbered. It must start over as a router that just started (logged SUPERSEDED)
# and rebuild from the agents' records, not tell healthy replicas' agents to end their servers nor
# number over the other router's order (found by the fault campaign: its Redis lab never
# recovered, every replica's order lost).
# Not in the default run (FTNET_E2E_KNOWN=1 or `run.sh --only superseded` adds it). Known
# failures: 1 of 8 runs at 75dfad2, 1 of 8 at 00b2705, 3 of 17 at 09b0cb1, 4 of 14 at 14f90b5.
# - A replica is taken out after the start-over as `missed_input` (then its fresh server joins):
#   an adopted connection names it, but its agent had no record of it (a short connection set up
#   by the other router while that agent was leaving it), so it has no leg there and its server
#   would miss the connection's input. Loud and safe; the replica's kernel may well have the
#   connection, and a router could probe it with the other agents' record instead (not done).
# - Before 00b2705, a short connection opened around the takeovers timed out (30 s): a router
#   whose agents had all fallen silent (the other held its addresses; the client still reached it)
#   sent its SYN-ACK at once, no agent to wait for. Such a router now holds it.
# - Before 75dfad2, ORDER LOST after the start-over: a session the start-over had ended gave its
#   verdict when its agent's connection closed.
# Since 5fd0cd4 agents that give a held router up come back without ORDER LOST (e2e router-hold).
# (Before: the replicas taken out, ORDER LOST and digests that differed — in 2 of 4 runs at
# 92572c5, 9 of 17 at bf34512, 1 of 12 at de0c4ad — were stale verdicts: the stalled router's on
# its own pause, and the other's on its agents leaving it; see ARCHITECTURE.md, probation.)
# Pass: the SUPERSEDED line; no ORDER LOST and no replica taken out after it; 0 client errors and
# every counter exact; all three replicas serving with equal digests.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init superseded "$@"
[[ $FAULT == none && $N == 3 ]] || die "superseded runs with 3 replicas and no replica fault"
REDIS_PORT=6379
lab_up --ha --port "$REDIS_PORT" --supervise --failure-ms 1000
LOGDIR=/run/ftnet/lab/$LAB
active() { lab status --name "$LAB" | awk '/router holding the addresses/ { print $NF; exit }'; }
agents_registered() { lab status --name "$LAB" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(a["state"] == "registered" for a in d.get("control", {}).get("agents", [])))'; }

timeout 120 "$FTNET" lab exec --name "$LAB" client -- \
	python3 "$E2E_DIR/joinload.py" --host "$VIP" --port "$REDIS_PORT" --conns 10 --duration 24 \
	--short-ms 100 >"$T/load.json" 2>"$T/load.err" &
load=$!
sleep 4
stalled=$(active)
[[ -n $stalled ]] || die "no router holds the addresses"
say "FAULT: the master ($stalled) stops for 2 s"
lab stall-router --name "$LAB" --ms 2000 >"$T/fault.out" 2>&1
cat "$T/fault.out"
sleep 2
now=$(active)
say "after the stall: $now holds the addresses"
if [[ $now != "$stalled" ]]; then
	lab kill-router --name "$LAB" >>"$T/fault.out" 2>&1
	say "FAULT: $now killed; $stalled takes the addresses back"
	wait_for 5 test "$(active)" = "$stalled" || true
fi
check_eq "the router that was stalled holds the addresses" "$stalled" "$(active)"
LOG=$LOGDIR/$stalled.log
line() { grep -m1 "SUPERSEDED" "$LOG"; }
check "the stalled router found itself superseded and started over" wait_for 10 line
say "$stalled: $(line | cut -c1-400 || true)"
wait_for 10 test "$(agents_registered)" -ge 3 || true
check_eq "every agent registered with it again" 3 "$(agents_registered)"

joinload_finish "$load"
after() { sed -n '/SUPERSEDED/,$p' "$LOG"; }
check_eq "no ORDER LOST after it started over" 0 "$(after | grep -c 'ORDER LOST' || true)"
check_eq "no replica taken out after it started over" 0 "$(after | grep -c 'declared down\|host lost; replica marked down\|told to end' || true)"
settle 1 2 3
same_digests "after the takeovers" 1 2 3
alive() { lab status --name "$LAB" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(r["alive"] for r in d["status"]["services"][0]["replicas"]))'; }
check_eq "all three replicas serve" 3 "$(alive)"
e2e_finish
