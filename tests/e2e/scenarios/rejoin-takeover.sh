#!/usr/bin/env bash
# (k2) Replica health survives a router takeover.
#
#  client ──veth── router  (master) ──┬── r1, r2, r3 (redis + agent)
#                  router2 (backup) ──┘   two routers under keepalived (lab --ha)
#
# The victim's Redis is killed (kill -9); the next connections find it refusing and the master
# marks it down. Then the master is killed (`lab kill-router`). The new master starts with no
# state of its own: it must learn from the agents (which keep what the router before told them)
# that the victim is out of service, and keep it out — a router restart or a takeover must never
# readmit a replica that left the group. Pass: the new master's log says the agents reported the
# victim out of service; its status shows the victim not alive from the start; 50 more INCRs
# through the VIP succeed and the survivors hold the exact count.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init rejoin-takeover "$@"
[[ $FAULT == kill ]] || die "rejoin-takeover runs with a kill"

REDIS_PORT=6379
lab_up --ha --port "$REDIS_PORT"
LOGDIR=/run/ftnet/lab/$LAB
VADDR=$(replica_ip "$VICTIM")
active() { lab status --name "$LAB" | awk '/router holding the addresses/ { print $NF; exit }'; }
victim_alive() { lab status --name "$LAB" --json | python3 -c "import json,sys; d=json.load(sys.stdin); print([r['alive'] for r in d['status']['services'][0]['replicas'] if r['addr'] == '$VADDR'][0])"; }
agents_registered() { lab status --name "$LAB" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(a["state"] == "registered" for a in d.get("control", {}).get("agents", [])))'; }
incr() { # incr N — N INCRs, one connection each; prints how many failed
	local i bad=0
	for ((i = 1; i <= $1; i++)); do
		[[ $(timeout 10 "$FTNET" lab exec --name "$LAB" client -- redis-cli -h "$VIP" -p "$REDIS_PORT" INCR health:n 2>&1) =~ ^[0-9]+$ ]] || bad=$((bad + 1))
	done
	echo "$bad"
}

check_eq "20 INCRs before the fault" 0 "$(incr 20)"
lab kill --name "$LAB" "$VICTIM" >"$T/fault.out" 2>&1
say "FAULT injected: kill -9 of r$VICTIM's redis"
check_eq "20 INCRs after the kill (the victim refuses, the others serve)" 0 "$(incr 20)"
wait_for 3 test "$(victim_alive)" = False || true
check_eq "the master marked r$VICTIM down" False "$(victim_alive)"

before=$(active)
lab kill-router --name "$LAB" >>"$T/fault.out" 2>&1
wait_for 5 bash -c "[[ \$('$FTNET' lab status --name '$LAB' 2>/dev/null | awk '/router holding the addresses/ { print \$NF; exit }') != '$before' ]]" || true
after=$(active)
say "takeover: $before -> $after"
check "a new master took over" test -n "$after" -a "$after" != "$before"
wait_for 5 test "$(agents_registered)" -ge "$N" || true
check_eq "every agent registered with the new master" "$N" "$(agents_registered)"
check_eq "the new master keeps r$VICTIM out from the start" False "$(victim_alive)"
reported() { grep -q "reports replica(s) .*$VADDR.* out of service" "$LOGDIR/$after.log"; }
wait_for 2 reported || true
check "the new master logged the agents' report" reported
check_eq "50 INCRs through the new master" 0 "$(incr 50)"
for r in "${SURVIVORS[@]}"; do
	wait_for 5 test "$(redis_at "$r" GET health:n)" = 90 || true
	check_eq "r$r counter" 90 "$(redis_at "$r" GET health:n)"
done
e2e_finish
