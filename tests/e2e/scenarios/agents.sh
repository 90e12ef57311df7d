#!/usr/bin/env bash
# (h) Agents: registration with a shared secret, refusal of a wrong one, and active failure
# detection. Every replica runs `ftnet agent`; a redis connection sits idle (passive detection has
# nothing to judge: no byte is owed) while the victim's link is cut. The router must declare the
# victim's host lost from the missing heartbeats alone, within dead_after (500 ms) plus a margin,
# while the connection is still idle; the connection then carries on with the survivors.
# Also: an agent with the wrong secret is refused and the router logs who and why; every live
# agent holds the record of the open connection.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init agents "$@"
[[ $FAULT == cut ]] || die "agents runs with a link cut (a kill leaves the host and its agent up)"

REDIS_PORT=6379
AFTER=5
DEAD_AFTER_MS=500
lab_up --port "$REDIS_PORT" --agents
LOG=/run/ftnet/lab/$LAB/router.log
agents_registered() { lab status --name "$LAB" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(a["state"] == "registered" for a in d.get("control", {}).get("agents", [])))'; }
check_eq "agents registered after lab up" "$N" "$(agents_registered)"

# A wrong secret: refused, with the reason in the router's log; the real agent stays registered.
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/wrong-secret"
timeout 3 "$FTNET" lab exec --name "$LAB" r1 -- "$FTNET" agent --router 198.18.11.1:7400 \
	--replica "$(replica_ip 1)" --secret-file "$T/wrong-secret" --host intruder >"$T/intruder.log" 2>&1 || true
check "router logged the refusal with its reason" grep -q "agent refused: authentication failed for replica $(replica_ip 1) (host \"intruder\"): wrong shared secret" "$LOG"
check "the intruder was told it was refused" grep -q "refused" "$T/intruder.log"
check_eq "agents still registered after the intruder" "$N" "$(agents_registered)"

idle_client_start 4 "$AFTER"
idle_client_ready
sleep 0.5
records=$(lab status --name "$LAB" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join(str(a["records"]) for a in d["control"]["agents"]))')
say "connection records held by the agents: $records"
check "every agent holds the open connection's record ($records)" python3 -c "import sys; sys.exit(0 if all(int(x) >= 1 for x in '$records'.split()) and len('$records'.split()) == $N else 1)"

t=$(now_ms)
lab cut --name "$LAB" "$VICTIM" >"$T/fault.out" 2>&1
say "FAULT injected: lab cut r$VICTIM while the connection is idle"
lost_line() { grep "host lost" "$LOG" | grep -m1 "replica=$(replica_ip "$VICTIM")"; }
wait_for 3 lost_line >/dev/null || true
line=$(lost_line || true)
say "router: ${line:-<no host-lost line>}"
check "router declared r$VICTIM's host lost" test -n "$line"
if [[ -n $line ]]; then
	lost_ms=$(python3 -c 'import sys,datetime; ts=sys.argv[1].split()[0]; print(int(datetime.datetime.fromisoformat(ts.replace("Z","+00:00")).timestamp()*1000))' "$line")
	detect=$((lost_ms - t))
	say "detection time: $detect ms after the cut (dead_after ${DEAD_AFTER_MS} ms, heartbeat 100 ms)"
	echo "agents detection_ms=$detect" >"$T/figure.txt"
	check "detected within dead_after + 400 ms ($detect ms)" test "$detect" -le $((DEAD_AFTER_MS + 400))
fi
victim_alive() { lab status --name "$LAB" --json | python3 -c "import json,sys; d=json.load(sys.stdin); print([r['alive'] for r in d['status']['services'][0]['replicas'] if r['addr'] == '$(replica_ip "$VICTIM")'][0])"; }
# (the status snapshot is refreshed every 250 ms)
wait_for 1 test "$(victim_alive)" = False || true
alive=$(victim_alive)
check_eq "r$VICTIM marked down while the client is still idle" False "$alive"
check "client still idle when the host was declared lost" test ! -s "$T/idle.json"

idle_client_finish "$AFTER" "idle connection carried on with the survivors"
e2e_finish
