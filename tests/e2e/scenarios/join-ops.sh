#!/usr/bin/env bash
# Membership at run time for a stateful group (issue 15 (d)): the operator adds, drains, removes
# and reloads replicas of Redis under `ftnet run --supervise` while writers run, and every replica
# that comes (back) serves only after joining with the group's state.
#
#  client ──veth── router (ftnet, sequencer) ──veth── r1, r2, r3 (redis under `ftnet run
#  (joinload)                                         --supervise`, agents --end-stale-servers);
#                                                     r4 a spare: namespace, server and agent up,
#                                                     not in the config until `replica add`
#
# Load: 20 long-lived connections of writers (INCR/APPEND/LPUSH, every reply checked) plus a new
# short connection every 100 ms (joinload.py). Through the admin socket and SIGHUP:
#   add r4     → a member out of service (not joined); its agent registers, ends the server that
#                ran before the add, the supervisor starts a fresh one, and it JOINS by itself
#   drain r2   → the servers follow the order, so the others hold every connection and the state:
#                it hands its connections over at once and is removed
#   add r2     → the same as r4: a fresh server, then a join
#   SIGHUP, the file listing r2, r3, r4 → r1 is removed
#   SIGHUP, the file listing r1 … r4   → r1 is added back, and joins
# Pass: every change accepted and logged; no replica serves between its add and its JOINED line;
# 0 client errors, every counter exact; DEBUG DIGEST equal on all four afterwards; each serves
# new connections. Figures: add → serving for each join, and the input pauses.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init join-ops "$@"
((N == 4)) || die "join-ops runs with 4 replicas (the 4th a spare)"

REDIS_PORT=6379
lab_up --port "$REDIS_PORT" --supervise --spares 1 --failure-ms 1000
LOG=/run/ftnet/lab/$LAB/router.log
watch_stalls "$LOG"
SOCK=/run/ftnet/lab/$LAB/router.sock
CFG=/run/ftnet/lab/$LAB/ftnet.toml
RPID=$(cat "/run/ftnet/lab/$LAB/router.pid")
R1=$(replica_ip 1) R2=$(replica_ip 2) R3=$(replica_ip 3) R4=$(replica_ip 4)
admin() { timeout 20 "$FTNET" replica "$@" --socket "$SOCK"; }
state_of() { # state_of ADDR → "state alive connections"
	lab status --name "$LAB" --json | python3 -c "import json,sys; d=json.load(sys.stdin); r=[r for r in d['status']['services'][0]['replicas'] if r['addr'] == sys.argv[1]]; print(f\"{r[0]['state']} {r[0]['alive']} {r[0]['connections']}\" if r else 'absent False 0')" "$1"
}
joins_of() { grep -c "replica $1 JOINED" "$LOG" || true; }
figures=()

# joins_after ADDR WHAT T0 — replica ADDR, added at T0 (ms), serves nowhere until it logs one more
# JOINED line than before; then it is serving. Records add → serving and the pause.
joins_after() {
	local addr=$1 what=$2 t0=$3 before=$4 line ms pause st early=0
	joined() { (($(joins_of "$addr") > before)); }
	local deadline=$(($(now_ms) + 60000))
	while ! joined && (($(now_ms) < deadline)); do
		st=$(state_of "$addr")
		# The status snapshot can lag the join's end by its refresh (250 ms): only a serving state
		# seen while the log still has no new JOINED line, twice in a row, counts.
		if [[ $st == serving* ]] && ! joined; then
			sleep 0.3
			joined || { [[ $(state_of "$addr") == serving* ]] && early=1; }
		fi
		sleep 0.1
	done
	check_eq "$what: never served before its join" 0 "$early"
	check "$what: joined with the group's state" joined
	line=$(grep "replica $addr JOINED" "$LOG" | tail -1 || true)
	say "router: ${line:-<no line>}"
	if [[ -n $line ]]; then
		ms=$(log_ms "$line")
		pause=$(sed -E 's/.*paused ([0-9]+) ms.*/\1/' <<<"$line")
		say "$what: → serving $((ms - t0)) ms, input paused $pause ms"
		figures+=("$what to_serving_ms=$((ms - t0)) pause_ms=$pause")
	fi
	serving() { [[ $(state_of "$addr") == serving\ True* ]]; }
	check "$what: serving" wait_for 3 serving
}

timeout 300 "$FTNET" lab exec --name "$LAB" client -- \
	python3 "$E2E_DIR/joinload.py" --host "$VIP" --port "$REDIS_PORT" --conns 20 --duration 40 \
	--short-ms 100 >"$T/load.json" 2>"$T/load.err" &
load=$!
sleep 3

# add r4: a member out of service until it joined.
before=$(joins_of "$R4")
t0=$(now_ms)
check "add r4 (a spare, not in the config) is accepted" bash -c "timeout 20 '$FTNET' replica add '$R4' --socket '$SOCK' >'$T/add4.out'"
say "add r4: $(cat "$T/add4.out")"
check "add r4: one log line" wait_for 3 grep -q "replica $R4 added" "$LOG"
st=$(state_of "$R4")
say "r4 right after the add: $st"
check "r4 is out of service right after the add (not joined)" test "${st%% *}" != serving
joins_after "$R4" "add r4" "$t0" "$before"

# drain r2: under the order it hands over at once and is removed.
check "drain r2 is accepted" bash -c "timeout 20 '$FTNET' replica drain '$R2' --socket '$SOCK' >'$T/drain2.out'"
say "drain r2: $(cat "$T/drain2.out")"
r2_removed() { [[ $(state_of "$R2") == removed* ]]; }
check "r2 removed after the drain" wait_for 3 r2_removed
check "drain r2: logged with the reason" grep -q "operator drained the replica.*follow the input order" "$LOG"
sleep 2

# add r2 back: its server missed input (stale): ended, restarted fresh, joins.
before=$(joins_of "$R2")
t0=$(now_ms)
check "add r2 back is accepted" admin add "$R2"
joins_after "$R2" "add r2 back" "$t0" "$before"

# SIGHUP: the file becomes the truth (r1 out, then in again).
cp "$CFG" "$T/ftnet.toml.orig"
sighup_replicas "$R2" "$R3" "$R4"
check "SIGHUP: the reload removes r1" wait_for 3 grep -q "SIGHUP: reloaded .*: 0 replica(s) added, 1 removed, 0 change(s) not applied" "$LOG"
r1_removed() { [[ $(state_of "$R1") == removed* ]]; }
check "r1 removed after the reload" wait_for 3 r1_removed
sleep 1
before=$(joins_of "$R1")
t0=$(now_ms)
sighup_replicas "$R1" "$R2" "$R3" "$R4"
check "SIGHUP: the reload adds r1 back" wait_for 3 grep -q "SIGHUP: reloaded .*: 1 replica(s) added, 0 removed, 0 change(s) not applied" "$LOG"
joins_after "$R1" "SIGHUP add r1" "$t0" "$before"
cp "$T/ftnet.toml.orig" "$CFG"

joinload_finish "$load"
printf '%s\n' "${figures[@]}" >"$T/figure.txt"
settle 1 2 3 4
same_digests "after the changes" 1 2 3 4
for a in "$R1" "$R2" "$R3" "$R4"; do
	busy() { in_ns client redis-cli -h "$VIP" -p "$REDIS_PORT" INCR probe >/dev/null && [[ $(state_of "$a") == serving\ True* ]]; }
	check "$a serving and alive" wait_for 5 busy
	say "$a: $(state_of "$a")"
done
check "no connection lost by the router" bash -c "! grep -q 'no replica left' '$LOG'"
e2e_finish
