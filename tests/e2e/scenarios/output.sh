#!/usr/bin/env bash
# Output policy `primary` (the default without voting): where the replicas' replies differ, the
# client's stream is never spliced. Redis × 3 under the shim. Redis `INFO` differs between
# replicas (process id, memory and CPU figures: even its length), as does `COMMAND DOCS` (what
# interactive redis-cli sends first: its order differs between Redis processes).
# 1. respcheck.py --mode info: one connection, 100 rounds of INFO, TIME and PING (pipelined),
#    every reply parsed: the INFO reply one bulk string of the length it announces, TIME two
#    strings of digits, PING's +PONG. With first copy wins (the behaviour before this policy) the
#    first longer reply from another replica spliced its tail into the stream and every later
#    reply was garbled (TIME's microseconds have no leading zeros: lengths differ often).
# 2. respcheck.py --mode docs: COMMAND DOCS then PING, well-formed.
# 3. FAULT=kill (the victim is r1, the replica the clients follow): a connection of INFO rounds
#    (its followers left it on the first INFO, their replies differed) and one of INCR rounds
#    (replies the replicas agree on) run while r1's Redis is killed. The INCR connection goes on
#    with r2's stream, every reply the next integer; the INFO connection has no replica left whose
#    stream matches what it got: it is reset — never handed another replica's bytes, nor r1's
#    FIN (its kernel's, the server killed with nothing unread), which waits for the verdict.
# 4. FAULT=none: the control. The same rounds with `output = "fastest"` (lab up --output
#    fastest) and the servers on the kernel's clock (--tick-ms 0: with the router's ticks TIME is
#    the same everywhere) garble the stream (the difference the policy makes).
# Pass: no malformed reply under the default policy; the router logged the followers leaving the
# INFO connection ("differs from what the client got") and marked nobody down; digests equal on
# the survivors; with the kill, the INCR connection completed and the INFO one ended in a reset.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
export FTNET_E2E_VICTIM=1
e2e_init output "$@"
[[ $N == 3 ]] || die "output runs with three replicas"
[[ $FAULT == none || $FAULT == kill ]] || die "output runs with none or kill"

REDIS_PORT=6379
ROUNDS=100
lab_up --port "$REDIS_PORT" --shim
LOG=/run/ftnet/lab/$LAB/router.log
resp() { timeout 90 "$FTNET" lab exec --name "$LAB" client -- python3 "$E2E_DIR/respcheck.py" --host "$VIP" --port "$REDIS_PORT" "$@"; }
field() { python3 -c "import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]]; print('null' if v is None else v)" "$1" "$2"; }
alive() { lab status --name "$LAB" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join(str(r["alive"]) for r in d["status"]["services"][0]["replicas"]))'; }

for i in $(seq 1 50); do printf 'SET k%d %s\r\n' "$i" "$(head -c $((i * 7)) /dev/zero | tr '\0' v)"; done |
	timeout 20 "$FTNET" lab exec --name "$LAB" client -- socat -t 2 - "TCP:$VIP:$REDIS_PORT" >/dev/null 2>&1 || true

if [[ $FAULT == none ]]; then
	resp --mode info --rounds "$ROUNDS" >"$T/info.json" || true
	say "INFO rounds: $(cat "$T/info.json" | cut -c1-400)"
	check_eq "INFO + PING rounds completed" "$ROUNDS" "$(field "$T/info.json" rounds)"
	check_eq "no malformed reply" null "$(field "$T/info.json" malformed_at)"
	resp --mode docs >"$T/docs.json" || true
	say "COMMAND DOCS: $(cut -c1-300 "$T/docs.json")"
	check_eq "COMMAND DOCS + PING well-formed" null "$(field "$T/docs.json" malformed_at)"
	check_eq "COMMAND DOCS + PING answered" 1 "$(field "$T/docs.json" rounds)"
	line=$(grep -m1 "differs from what the client got" "$LOG" || true)
	say "router: ${line:-<nothing logged>}"
	check "the replies did differ: the followers left the connection, logged with the offset" \
		grep -q "reply differs from what the client got from replica $(replica_ip 1) in the bytes before reply byte" "$LOG"
	sleep 0.5
	check_eq "nobody marked down (a reply that differs is no failure)" "True True True" "$(alive)"
	check "nobody evicted for the service" bash -c "! grep -Eq 'marked down|out of service' '$LOG'"
	settle 1 2 3
	same_digests "after the rounds" 1 2 3

	say "control: the same rounds with output = \"fastest\" (first copy of each byte wins)"
	timeout 120 "$FTNET" lab down --name "$LAB" >/dev/null 2>&1 || die "lab down failed"
	# (The router's clock ticks off: with them every replica's TIME is the same, and only INFO's
	# figures would differ — rarely in length.)
	lab_up --port "$REDIS_PORT" --shim --output fastest --tick-ms 0
	# Up to 20 times as many rounds: replicas answer TIME within the same millisecond, so its
	# length differs only now and then (seen: round 46).
	resp --mode info --rounds $((ROUNDS * 20)) --seconds 60 >"$T/control.json" || true
	say "control INFO rounds: $(cut -c1-400 "$T/control.json")"
	m=$(field "$T/control.json" malformed_at)
	say "control: first malformed round $m: $(field "$T/control.json" why | cut -c1-200)"
	check "control: with output = \"fastest\" the client's stream is spliced (a malformed reply)" test "$m" != null
else
	rm -f "$T/a.ready" "$T/b.ready"
	resp --mode info --rounds 100000 --seconds 20 --ready "$T/a.ready" >"$T/info.json" 2>"$T/info.err" &
	a=$!
	resp --mode incr --rounds 4000 --gap-ms 2 --seconds 30 --key output:n --ready "$T/b.ready" >"$T/incr.json" 2>"$T/incr.err" &
	b=$!
	wait_for 10 test -e "$T/a.ready" -a -e "$T/b.ready" || die "clients never connected"
	sleep 1.5
	t=$(now_ms)
	lab kill --name "$LAB" 1 >"$T/fault.out" 2>&1 || die "lab kill failed: $(cat "$T/fault.out")"
	say "FAULT injected: lab kill r1 (the followed replica)"
	wait "$a" || true
	wait "$b" || true
	say "INFO connection: $(cut -c1-300 "$T/info.json")"
	say "INCR connection: $(cut -c1-300 "$T/incr.json")"
	# r1's kernel closes the killed server's connections, with a FIN where nothing was unread;
	# it may come before the agent's verdict, and is held until then (a FIN passed first ended
	# the INFO connection as if the server had closed it: a FLAKY before).
	say "r1 FINs held for the detached followers (lone_fins_held): $(lab_counter lone_fins_held)"
	check_eq "INCR connection: no malformed reply across the failover" null "$(field "$T/incr.json" malformed_at)"
	check_eq "INCR connection: went on to its last round" 4000 "$(field "$T/incr.json" rounds)"
	check_eq "INCR connection: not ended" null "$(field "$T/incr.json" end)"
	check_eq "INFO connection: no malformed reply" null "$(field "$T/info.json" malformed_at)"
	check "INFO connection: reset when r1 died (no replica left whose stream matches)" \
		bash -c "[[ \$(python3 -c \"import json; print(json.load(open('$T/info.json'))['end'] or '')\") == *Reset* ]]"
	check "the router took r1 out of the service" grep -q "replica $(replica_ip 1) declared down" "$LOG"
	settle 2 3
	same_digests "survivors" 2 3
fi
e2e_finish
