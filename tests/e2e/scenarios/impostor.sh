#!/usr/bin/env bash
# Agent impersonation (issue 13, item 3): holding the shared secret is not enough to speak for a
# replica. With agents on every replica:
#   (1) an intruder with the RIGHT secret registers as r2 from the client namespace, then falls
#       silent (SIGSTOP) for longer than dead_after;
#   (2) a second agent with the right secret on r2's own address (r2's namespace) tries to take
#       over from r2's live agent, then falls silent.
#   (3) SIGHUP is sent to r1's agent.
#   (4) 400 unauthenticated connections to the control port from the client side, each with a
#       200 kB hello.
#   (5) a forger on an agent's path: with r3's agent stopped, a session for r3 (tests/e2e/forge.py,
#       from r3's address) registers, has its sealed heartbeat answered, then a frame no agent
#       sealed follows: a replay of that heartbeat, a plain `Stored`, an altered heartbeat.
# Pass: (1) and (2) refused and logged with the reason; r2's real agent stays registered, r2
# stays alive (a registered intruder falling silent would have it marked down); r1's agent
# survives SIGHUP, logs it as ignored and stays registered; a fresh connection is served by all
# three replicas; (5) each forged frame ends its session, is logged and counted
# (`control.rejected_frames`: 3), and r3 stays in service.
#
#   client 198.18.1.2 (intruder) ──veth── router (control :7400) ──veth── r1 (agent)
#                                                                 ──veth── r2 (agent, 2nd agent)
#                                                                 ──veth── r3 (agent)
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init impostor "$@"
((N == 3)) || die "impostor runs with 3 replicas"

PORT=7000
DEAD_AFTER_MS=500
lab_up --port "$PORT" --agents --server "socat -t 60 TCP-LISTEN:{port},fork,reuseaddr EXEC:cat"
DIR=/run/ftnet/lab/$LAB
LOG=$DIR/router.log
R2=$(replica_ip 2)
status_json() { lab status --name "$LAB" --json; }
r2_state() { status_json | python3 -c "import json,sys; d=json.load(sys.stdin); a=[a for a in d['control']['agents'] if a['replica'] == '$R2']; r=[r for r in d['status']['services'][0]['replicas'] if r['addr'] == '$R2'][0]; print(f\"alive={r['alive']} agent={a[0]['state'] if a else None} host={a[0]['host'] if a else None}\")"; }
check_eq "r2 before" "alive=True agent=registered host=$LAB-r2" "$(r2_state)"

INTRUDER_PID=
stop_intruder() {
	if [[ -n $INTRUDER_PID ]]; then
		kill -KILL "$INTRUDER_PID" 2>/dev/null || true
		wait "$INTRUDER_PID" 2>/dev/null || true
	fi
	INTRUDER_PID=
}
trap 'rc=$?; set +e; stop_intruder; (exit $rc); e2e_on_exit' EXIT

# intrude WHO NAME — an agent for r2 with the lab's secret, run in namespace WHO; after 1.5 s
# it is stopped (SIGSTOP: silent, connection open) for dead_after + 1 s, then killed.
intrude() {
	local who=$1 name=$2 ns
	ns=ftnet-$LAB-$who
	ip netns exec "$ns" "$FTNET" agent --router "$3:7400" --replica "$R2" \
		--secret-file "$DIR/secret" --host "$name" --shim-socket "$T/$name-shim.sock" >"$T/$name.log" 2>&1 &
	INTRUDER_PID=$!
	sleep 1.5
	kill -STOP "$INTRUDER_PID"
	say "$name (in $who) stopped after 1.5 s: $(grep -m1 -E 'registered|refused' "$T/$name.log" | cut -c1-250)"
	sleep $(((DEAD_AFTER_MS + 1000) / 1000)).5
	check_eq "$name: r2 unaffected" "alive=True agent=registered host=$LAB-r2" "$(r2_state)"
	stop_intruder
}
intrude client intruder 198.18.1.1
check "router logged the intruder's refusal (wrong address)" \
	grep -q "agent refused: an agent for replica $R2 must connect from that address, this one connects from 198.18.1.2" "$LOG"
intrude r2 second 198.18.12.1
check "router logged the second agent's refusal (live agent)" \
	grep -q "agent refused: replica $R2 already has a live agent" "$LOG"

# SIGHUP (logrotate, `systemctl reload`) does not stop an agent either.
apid=$(cat "$DIR/r1/agent.pid")
kill -HUP "$apid"
sleep 1
check "r1's agent survived SIGHUP" test -d "/proc/$apid"
check "r1's agent logged SIGHUP as ignored" grep -q "SIGHUP: reload not supported yet, ignored" "$DIR/r1/agent.log"
r1_agent=$(status_json | python3 -c "import json,sys; d=json.load(sys.stdin); print([a['state'] for a in d['control']['agents'] if a['replica'] == '$(replica_ip 1)'])")
check_eq "r1's agent still registered" "['registered']" "$r1_agent"

# (4) The control port under an unauthenticated flood from the client side: 400 connections opened
# at once, one in four sending a 200 kB hello. The router serves at most 256 sessions at once
# (closing the others at once, one log line per power of two), each unauthenticated one for at
# most ~1 s; its threads stay bounded and go away, it echoes and logs none of the junk, and the
# agents stay registered.
rpid=$(status_json | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
threads() { ls "/proc/$rpid/task" | wc -l; }
t_before=$(threads)
cat >"$T/flood.py" <<'PY'
import json, select, socket, struct, sys, time
host, n = sys.argv[1], int(sys.argv[2])
hello = json.dumps({"type": "hello", "version": 7, "replica": "198.18.12.2",
                    "host": "x" * 200000, "nonce": "00" * 16}).encode()
socks, back = [], 0
# All at once (non-blocking connects), so that they are open together: the router ends an
# unauthenticated session after about a second, so one at a time would never fill its cap.
for i in range(n):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex((host, 7400))
    socks.append(s)
deadline = time.time() + 5
pending = list(socks)
while pending and time.time() < deadline:
    _, w, _ = select.select([], pending, [], 0.5)
    pending = [s for s in pending if s not in w]
for s in socks:
    s.setblocking(True)
    s.settimeout(0.2)
open(sys.argv[3], "w").close()
# One in four then sends the hello; the others say nothing and hold their session until the
# router's timeout.
for i, s in enumerate(socks):
    if i % 4 == 0:
        try:
            s.sendall(struct.pack(">I", len(hello)) + hello)
        except OSError:
            pass
time.sleep(1.5)
for s in socks:
    try:
        back = max(back, len(s.recv(1 << 20)))
    except OSError:
        pass
print(json.dumps({"opened": len(socks), "longest_answer": back}))
time.sleep(0.5)
PY
timeout 60 "$FTNET" lab exec --name "$LAB" client -- python3 "$T/flood.py" 198.18.1.1 400 "$T/flood.open" >"$T/flood.json" 2>"$T/flood.err" &
FLOOD_PID=$!
wait_for 10 test -e "$T/flood.open" || true
t_peak=$(threads)
wait "$FLOOD_PID" || true
say "flood: $(cat "$T/flood.json" "$T/flood.err" | head -c 300); router threads $t_before before, $t_peak during"
check "the router's threads stay bounded under the flood ($t_peak ≤ $t_before + 256 + 8)" test "$t_peak" -le $((t_before + 264))
longest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["longest_answer"])' "$T/flood.json" 2>/dev/null || echo 999999)
check "no answer echoes the 200 kB hello (longest answer: $longest bytes)" test "$longest" -lt 1000
check "no log line repeats it" bash -c "! grep -q xxxxxxxxxxxxxxxx '$LOG'"
check "no log line over 2 kB (longest: $(wc -L <"$LOG"))" test "$(wc -L <"$LOG")" -le 2048
# (Whether the flood reaches the 256-session cap depends on the listen backlog and on how fast
# sessions expire: reported, not asserted.)
say "sessions over the cap closed at once: $(grep -c "connections open already; closing new ones at once" "$LOG" || true) log line(s)"
agents_ok() { [[ $(status_json | python3 -c "import json,sys; d=json.load(sys.stdin); print(sum(a['state'] == 'registered' for a in d['control']['agents']))") == 3 ]]; }
check "the three agents are still registered" agents_ok
settled() { (($(threads) <= t_before + 4)); }
check "the flood's threads are gone within 5 s" wait_for 5 settled

# A fresh connection is served by all three replicas.
timeout 20 "$FTNET" lab exec --name "$LAB" client -- python3 "$E2E_DIR/holdconn.py" --host "$VIP" \
	--port "$PORT" --ready-file "$T/held.port" --release-file "$T/held.release" --max 10 \
	>"$T/fresh.json" 2>"$T/fresh.err" &
HELD_PID=$!
wait_for 10 test -s "$T/held.port" || true
sleep 0.6
conns=$(status_json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join(str(r["connections"]) for r in d["status"]["services"][0]["replicas"]))')
touch "$T/held.release"
rc=0
wait "$HELD_PID" || rc=$?
check_eq "fresh connection echoed ($(cat "$T/fresh.json"))" 0 "$rc"
check "the fresh connection is served by all three replicas (connections per replica: $conns)" \
	python3 -c "import sys; c=[int(x) for x in '$conns'.split()]; sys.exit(0 if len(c) == 3 and min(c) >= 1 else 1)"

# (5) Frames after the handshake are sealed: a forger on the path (who has no session key) can
# neither replay, alter nor inject one.
R3=$(replica_ip 3)
rejected() { status_json | python3 -c 'import json,sys; print(json.load(sys.stdin)["control"]["rejected_frames"])'; }
check_eq "no frame rejected before" 0 "$(rejected)"
kill -TERM "$(cat "$DIR/r3/agent.pid")"
r3_gone() { [[ $(status_json | python3 -c "import json,sys; d=json.load(sys.stdin); print(len([a for a in d['control']['agents'] if a['replica'] == '$R3' and a['state'] == 'registered']))") == 0 ]]; }
check "r3's agent stopped" wait_for 5 r3_gone
n=0
for forge in replay plain alter; do
	timeout 20 "$FTNET" lab exec --name "$LAB" r3 -- python3 "$E2E_DIR/forge.py" --router 198.18.13.1:7400 \
		--replica "$R3" --secret-file "$DIR/secret" --forge "$forge" >"$T/forge-$forge.json" 2>&1 || true
	n=$((n + 1))
	say "forged ($forge): $(head -c 300 "$T/forge-$forge.json")"
	check_eq "$forge: registered, its sealed heartbeat answered, closed after the forgery" \
		'{"registered": true, "ack_ok": true, "closed_after_forgery": true}' "$(cat "$T/forge-$forge.json")"
	# (The status snapshot is refreshed every 250 ms.)
	counted() { [[ $(rejected) == "$1" ]]; }
	check "$forge: counted ($n)" wait_for 3 counted "$n"
done
check "the router logged each forged frame" test "$(grep -c "failed its authentication tag" "$LOG")" -eq 3
alive3() { status_json | python3 -c "import json,sys; d=json.load(sys.stdin); print([r['alive'] for r in d['status']['services'][0]['replicas'] if r['addr'] == '$R3'][0])"; }
check_eq "r3 stays in service" True "$(alive3)"
e2e_finish
