#!/usr/bin/env bash
# Membership at run time (COSCANet-FT §V: replicas added and removed at any time), under load.
#
#  client ──veth── router (ftnet, agents) ──veth── r1, r2, r3 (in the config), r4 (a spare: namespace,
#  (stallmeter ×3,                          server and agent up, not in the config until `replica add`)
#   connstorm)                              every server: socat echo, stateless
#
# Three long-lived echo streams (stallmeter.py) and a storm of short connections (connstorm.py)
# run for ~16 s while the operator, through the admin socket:
#   2 s  drains r2        → it gets no new connection; the streams it is in go on with it
#   4 s  adds r4          → new connections use it (its replies are routed in at run time)
#   7 s  removes r3       → it leaves every connection at once; the streams go on without it
#   9 s  removes r1       → the streams go on with r2 alone (draining, never removed from
#                           under a connection), new connections with r4 alone
#  11 s  SIGHUP, the file listing r2, r3, r4 → r3 is added back; then a broken file: no change
#  12 s  SIGHUP, the file with a second service (echo on port 7001 by r2 and r3) → it starts
#  13 s  SIGHUP, the file without it → new connections refused, one opened before goes on
# and tries what must be refused (removing the last serving replica, adding a member twice,
# draining an unknown address). Pass: every stream intact, every short connection answered, no
# client reset; each change logged on one line; status shows each replica's state; r4 served
# new connections; the new service echoes; r2 is announced drained once the streams end.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init membership "$@"
((N == 4)) || die "membership runs with 4 replicas (the 4th a spare)"

PORT=7000
lab_up --port "$PORT" --server "socat -t 60 TCP-LISTEN:{port},fork,reuseaddr EXEC:cat" --spares 1 --agents
LOG=/run/ftnet/lab/$LAB/router.log
SOCK=/run/ftnet/lab/$LAB/router.sock
R1=$(replica_ip 1) R2=$(replica_ip 2) R3=$(replica_ip 3) R4=$(replica_ip 4)
admin() { timeout 20 "$FTNET" replica "$@" --socket "$SOCK"; }
state_of() { # state_of ADDR → "state connections"
	lab status --name "$LAB" --json | python3 -c "import json,sys; d=json.load(sys.stdin); r=[r for r in d['status']['services'][0]['replicas'] if r['addr'] == sys.argv[1]]; print(f\"{r[0]['state']} {r[0]['connections']}\" if r else 'absent 0')" "$1"
}

DURATION=16
for m in 1 2 3; do
	timeout 120 "$FTNET" lab exec --name "$LAB" client -- \
		python3 "$E2E_DIR/stallmeter.py" --host "$VIP" --port "$PORT" --chunk 1024 --interval-ms 2 \
		--duration "$DURATION" --warmup 0.5 >"$T/stream$m.json" 2>"$T/stream$m.err" &
	eval "meter$m=\$!"
done
timeout 120 "$FTNET" lab exec --name "$LAB" client -- \
	python3 "$E2E_DIR/connstorm.py" --host "$VIP" --port "$PORT" --duration "$DURATION" --inflight 4 \
	--timeout 20 --max 20000 >"$T/storm.json" 2>"$T/storm.err" &
storm=$!

sleep 2
check "drain r2 is accepted" admin drain "$R2"
# (the status snapshot is refreshed every 250 ms)
r2_draining() { [[ $(state_of "$R2") == draining* ]]; }
wait_for 2 r2_draining || true
check_eq "status: r2 draining" draining "$(state_of "$R2" | cut -d' ' -f1)"
check "drain r2: one log line" wait_for 3 grep -q "replica $R2 draining" "$LOG"

sleep 1.5
check "add r4 (a spare, not in the config) is accepted" admin add "$R4"
check "add r4: one log line" wait_for 3 grep -q "replica $R4 added" "$LOG"
r4_busy() { local s; s=$(state_of "$R4"); [[ ${s##* } -gt 0 ]]; }
wait_for 3 r4_busy || true
r4=$(state_of "$R4")
say "r4 after add: $r4"
check "r4 serves new connections" test "${r4%% *}" = serving -a "${r4##* }" -gt 0

sleep 1.5
check "remove r3 is accepted" admin remove "$R3"
check "remove r3: one log line" wait_for 3 grep -q "replica $R3 removed" "$LOG"
r3_removed() { [[ $(state_of "$R3") == "removed 0" ]]; }
wait_for 2 r3_removed || true
check_eq "status: r3 removed, in no connection" "removed 0" "$(state_of "$R3")"

sleep 2
check "remove r1 is accepted (r4 still serves)" admin remove "$R1"
check "refused: removing r4, the last serving replica" bash -c "! timeout 20 '$FTNET' replica remove '$R4' --socket '$SOCK' 2>'$T/refuse1.err' && grep -q 'last serving replica' '$T/refuse1.err'"
check "refused: adding r4 twice" bash -c "! timeout 20 '$FTNET' replica add '$R4' --socket '$SOCK' 2>'$T/refuse2.err' && grep -q 'already a member' '$T/refuse2.err'"
check "refused: draining an address no service lists" bash -c "! timeout 20 '$FTNET' replica drain 10.9.9.9 --socket '$SOCK' 2>'$T/refuse3.err' && grep -q 'no service lists replica 10.9.9.9' '$T/refuse3.err'"
say "states: r1 $(state_of "$R1"), r2 $(state_of "$R2"), r3 $(state_of "$R3"), r4 $(state_of "$R4")"

# 11 s: the file becomes the truth on SIGHUP (`systemctl reload`): it now lists r2, r3, r4, so
# r3 (removed at run time) is a member again; r1 (removed, not listed) stays out; r2 stays
# draining. A file that does not validate changes nothing.
sleep 1.5
CFG=/run/ftnet/lab/$LAB/ftnet.toml
RPID=$(cat "/run/ftnet/lab/$LAB/router.pid")
cp "$CFG" "$T/ftnet.toml.orig"
sighup_replicas "$R2" "$R3" "$R4"
check "SIGHUP: the reload adds r3 back, removes nobody" wait_for 3 grep -q "SIGHUP: reloaded .*: 1 replica(s) added, 0 removed, 0 change(s) not applied" "$LOG"
r3_serving() { [[ $(state_of "$R3") == serving* ]]; }
check "status: r3 serving again after the reload" wait_for 2 r3_serving
check_eq "status: r2 still draining after the reload" draining "$(state_of "$R2" | cut -d' ' -f1)"
cp "$CFG" "$T/ftnet.toml.now"
echo "this is not toml [" >>"$CFG"
kill -HUP "$RPID"
check "SIGHUP with a broken file: nothing changed, and said why" wait_for 3 grep -q "SIGHUP: .*nothing changed" "$LOG"

# 12 s: a service new in the file starts on SIGHUP: echo on port 7001 of the same VIP, served by
# r2 and r3 (a second socat each) — replicas whose replies on 7000 are routed already, so their
# rules for 7001 must come before their skip rule. The streams on 7000 go on untouched.
for r in 2 3; do
	timeout 30 "$FTNET" lab exec --name "$LAB" "r$r" -- socat -t 10 TCP-LISTEN:7001,fork,reuseaddr EXEC:cat \
		>"$T/echo2-r$r.log" 2>&1 &
done
cp "$T/ftnet.toml.now" "$CFG"
printf '\n[[service]]\nname = "echo2"\nvip = "%s"\nports = [7001]\nreplicas = ["%s", "%s"]\n' "$VIP" "$R2" "$R3" >>"$CFG"
sleep 0.3
kill -HUP "$RPID"
check "SIGHUP: the reload starts service echo2, changes nothing else" wait_for 3 grep -q "SIGHUP: reloaded .*: 0 replica(s) added, 0 removed, 0 change(s) not applied, 1 service(s) added" "$LOG"
# The event's line comes from the data plane, which drains the core's events after the reload's
# summary line (written by the SIGHUP handler): it may follow it by a few milliseconds.
check "service echo2 added: one log line" wait_for 3 grep -q "service echo2 added (SIGHUP)" "$LOG"
echo2() { [[ $(echo "hello-7001" | timeout 5 "$FTNET" lab exec --name "$LAB" client -- socat -t 2 - "TCP:$VIP:7001" 2>/dev/null) == hello-7001 ]]; }
check "a client is echoed by the new service (VIP:7001)" wait_for 5 echo2
kill -HUP "$RPID"
check "SIGHUP again with the same file: nothing to do" wait_for 3 grep -q "SIGHUP: reloaded .*: 0 replica(s) added, 0 removed, 0 change(s) not applied, 0 service(s) added" "$LOG"
check "the router still steers r2's and r3's replies on 7001 (echo again)" echo2

# 13 s: the service gone from the file on SIGHUP: no new connection (refused at once, as by a
# closed port), while one opened before goes on to its end.
timeout 60 "$FTNET" lab exec --name "$LAB" client -- python3 "$E2E_DIR/holdconn.py" --host "$VIP" \
	--port 7001 --ready-file "$T/hold.ready" --release-file "$T/hold.release" --max 30 \
	>"$T/hold.json" 2>"$T/hold.err" &
hold=$!
check "a connection to echo2 is open" wait_for 5 test -s "$T/hold.ready"
cp "$T/ftnet.toml.now" "$CFG"
kill -HUP "$RPID"
check "SIGHUP: the reload removes service echo2, changes nothing else" wait_for 3 grep -q "SIGHUP: reloaded .*: 0 replica(s) added, 0 removed, 0 change(s) not applied, 0 service(s) added, 1 service(s) removed" "$LOG"
check "service echo2 removed: one log line, with its open connection" wait_for 3 grep -q "service echo2 removed (SIGHUP.*its 1 open connection(s) finish" "$LOG"
refused() { ! echo x | timeout 5 "$FTNET" lab exec --name "$LAB" client -- socat -t 2 - "TCP:$VIP:7001" 2>"$T/refused.err" && grep -qi "refused" "$T/refused.err"; }
check "a new connection to the removed service is refused" refused
removed_shown() { lab status --name "$LAB" | grep -q "^service echo2 .*REMOVED"; }
check "status shows echo2 removed while its connection is open" wait_for 3 removed_shown
touch "$T/hold.release"
rc=0
wait "$hold" || rc=$?
say "held connection: $(cat "$T/hold.json")"
check_eq "the connection opened before the removal echoed to its end" 0 "$rc"
cp "$T/ftnet.toml.orig" "$CFG"

for m in 1 2 3; do
	rc=0
	eval "wait \$meter$m" || rc=$?
	say "stream $m: $(cat "$T/stream$m.json")"
	[[ -s $T/stream$m.err ]] && say "stream $m stderr: $(head -c 1000 "$T/stream$m.err")"
	check_eq "long-lived stream $m intact through drain, add and removes" 0 "$rc"
done
rc=0
wait "$storm" || rc=$?
say "connstorm: $(cat "$T/storm.json")"
check_eq "connstorm exit status" 0 "$rc"
failed=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['failed'])" "$T/storm.json" 2>/dev/null || echo "?")
total=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['total'])" "$T/storm.json" 2>/dev/null || echo 0)
check_eq "short connections that failed" 0 "$failed"
check "short connections made throughout ($total)" test "$total" -gt 100
check "no connection lost by the router" bash -c "! grep -q 'no replica left' '$LOG'"
wait_for 5 grep -q "replica $R2 drained" "$LOG" || true
check "r2 announced drained once its streams ended" grep -q "replica $R2 drained" "$LOG"
check_eq "r2 drained: one line" 1 "$(grep -c "replica $R2 drained" "$LOG")"
e2e_finish
