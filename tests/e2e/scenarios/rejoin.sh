#!/usr/bin/env bash
# (k) A replica that left the group is never readmitted by its agent coming back.
#
#  client ──veth── router (ftnet, agents' control channel) ──veth── r1, r2, r3 (redis + agent)
#                                                            ╳ the victim's link, cut for 5 s
#
# Redis × 3 with agents under a write load (SETs of random keys from 10 connections: commands whose
# final state and replies do not depend on their order, so the survivors agree without the shim;
# an INCR's reply does, and two replicas applying two connections' INCRs of one key in different
# orders answer different numbers, of different lengths across a power of ten, which no router
# without the shim can merge). The victim's
# link is cut for 5 s while the writes go on: its agent falls silent, the router declares its
# host lost and takes it out. The link comes back with a server that missed every write since;
# its agent registers again. Pass: the router logs that the replica stays out of service; it gets
# no new connection (its command count does not move while 200 more commands go through the
# VIP); `ftnet status` shows it not alive; the writes saw no error; the survivors' DEBUG DIGESTs
# are equal. Then the operator's `ftnet replica enable` brings it back: new connections use it.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init rejoin "$@"
[[ $FAULT == cut ]] || die "rejoin runs with a link cut"

REDIS_PORT=6379
CUT_S=5
# Passive detection slower than the agents' (dead_after 500 ms), so that the victim leaves as a
# lost host — the path by which it used to come back when its agent registered again.
lab_up --port "$REDIS_PORT" --agents --failure-ms 3000
LOG=/run/ftnet/lab/$LAB/router.log
SOCK=/run/ftnet/lab/$LAB/router.sock
VIP_ADDR=$(replica_ip "$VICTIM")
victim_alive() { lab status --name "$LAB" --json | python3 -c "import json,sys; d=json.load(sys.stdin); print([r['alive'] for r in d['status']['services'][0]['replicas'] if r['addr'] == '$VIP_ADDR'][0])"; }

# The write load: bounded rounds of redis-benchmark until the cut is over and healed.
writes() {
	local i rc=0
	for ((i = 1; i <= 60; i++)); do
		timeout 60 "$FTNET" lab exec --name "$LAB" client -- redis-benchmark -h "$VIP" -p "$REDIS_PORT" \
			-c 10 -n 4000 -r 10000 -t set -q >>"$T/writes.out" 2>&1 || rc=$?
		((rc == 0)) || { echo "round $i: exit $rc" >>"$T/writes.out"; break; }
		[[ -e $T/stop ]] && break
	done
	echo "$i rounds, exit $rc" >"$T/writes.done"
}
writes &
WRITER=$!
sleep 1
lab cut --name "$LAB" "$VICTIM" >"$T/fault.out" 2>&1
say "FAULT injected: lab cut r$VICTIM under writes"
wait_for 5 grep -q "host lost.*replica=$VIP_ADDR\|replica=$VIP_ADDR.*host lost" "$LOG" || true
check "router declared r$VICTIM's host lost" grep -q "host lost" "$LOG"
wait_for 2 test "$(victim_alive)" = False || true
check_eq "status: r$VICTIM marked down" False "$(victim_alive)"
sleep "$CUT_S"
lab heal --name "$LAB" "$VICTIM" >>"$T/fault.out" 2>&1
say "r$VICTIM's link restored"
stays_out() { grep -q "replica stays out of service.*" "$LOG"; }
wait_for 10 stays_out || true
check "router logged that r$VICTIM stays out although its agent registered again" stays_out
touch "$T/stop"
wait "$WRITER" || true
say "writes: $(cat "$T/writes.done")"
check "the writes completed without error" grep -q "exit 0" "$T/writes.done"
check "no error in the writes' output" no_errors "$T/writes.out"

wait_for 2 test "$(victim_alive)" = False || true
check_eq "status: r$VICTIM not alive after its agent came back" False "$(victim_alive)"
for ((i = 1; i <= 200; i++)); do
	timeout 10 "$FTNET" lab exec --name "$LAB" client -- redis-cli -h "$VIP" -p "$REDIS_PORT" INCR rejoin:probe >/dev/null 2>&1 || true
done
check_eq "r$VICTIM got none of 200 new connections (its rejoin:probe)" "" "$(redis_at "$VICTIM" GET rejoin:probe)"
settle "${SURVIVORS[@]}"
same_digests "survivors" "${SURVIVORS[@]}"
for r in "${SURVIVORS[@]}"; do check_eq "r$r probe counter" 200 "$(redis_at "$r" GET rejoin:probe)"; done

# The operator's way back.
check "ftnet replica enable r$VICTIM" "$FTNET" replica enable "$VIP_ADDR" --socket "$SOCK"
check "router logged the operator's action" grep -q "operator brought the replica back" "$LOG"
wait_for 2 test "$(victim_alive)" = True || true
check_eq "status: r$VICTIM alive again" True "$(victim_alive)"
timeout 10 "$FTNET" lab exec --name "$LAB" client -- redis-cli -h "$VIP" -p "$REDIS_PORT" INCR rejoin:after >/dev/null
check_eq "r$VICTIM serves new connections again (its rejoin:after)" 1 "$(redis_at "$VICTIM" GET rejoin:after)"
check "an unknown replica is refused with a reason" bash -c "! '$FTNET' replica enable 10.9.9.9 --socket '$SOCK' 2>'$T/enable.err' && grep -q 'no service lists replica 10.9.9.9' '$T/enable.err'"
e2e_finish
