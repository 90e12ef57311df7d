#!/usr/bin/env bash
# Operator mistakes (issue 13, item 4): the running router keeps serving a client throughout.
# probe.py opens a fresh echo connection through the VIP every 100 ms while, in the router's
# namespace:
#   (1) a second `ftnet router` is started with the same config;
#   (2) one with another status_socket (same TUN, same table);
#   (3) one with another status_socket and table (same TUN);
#   (4) one with another status_socket and TUN (same table);
#   (5) one with another TUN and table, that TUN held open by another program;
#   (6) SIGHUP is sent to the running router (what `systemctl reload` sends): the unchanged file reloads to no change.
# Pass: (1)-(5) exit 1 at once with an error naming the running router's (or that program's) pid
# and leave the policy rules exactly as they were; after (6) the router is still running and logged the signal
# as ignored; every probe succeeded; every replica alive; `ftnet status --json` names the router's
# version and role (active) with a fresh timestamp, and its socket is root's alone (0600).
#
#   client 198.18.1.2 ──veth── router ns: ftnet router (pid P, TUN ftnet0, table 7000) ── r1, r2
#   probe.py                   + the second routers of (1)-(5), which must not touch it
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init operator "$@"

PORT=7000
lab_up --port "$PORT" --server "socat -t 60 TCP-LISTEN:{port},fork,reuseaddr EXEC:cat"
DIR=/run/ftnet/lab/$LAB
CFG=$DIR/ftnet.toml
LOG=$DIR/router.log
RNS=ftnet-$LAB-router
router_pid() { lab status --name "$LAB" --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])' 2>/dev/null; }
wait_for 5 router_pid >/dev/null || die "the router's status never showed its pid"
pid=$(router_pid)
say "running router: pid $pid"
rules() { ip -n "$RNS" rule show; }
rules >"$T/rules.before"
say "its rules: $(grep -c . "$T/rules.before") lines"

timeout 60 "$FTNET" lab exec --name "$LAB" client -- python3 "$E2E_DIR/probe.py" --host "$VIP" \
	--port "$PORT" --stop-file "$T/probe.stop" --ready-file "$T/probe.ready" --max 50 \
	>"$T/probe.json" 2>"$T/probe.err" &
PROBE_PID=$!
wait_for 10 test -e "$T/probe.ready" || die "probes never succeeded: $(cat "$T/probe.err")"

# second NAME SED — a second router with the lab's config edited by SED; must fail at once.
second() {
	local name=$1 edit=$2 rc=0
	sed -e "$edit" "$CFG" >"$DIR/$name.toml"
	timeout 10 "$FTNET" lab exec --name "$LAB" router -- "$FTNET" router --config "$DIR/$name.toml" \
		>"$T/$name.log" 2>&1 || rc=$?
	say "$name: exit $rc: $(grep -m1 'error' "$T/$name.log" | cut -c1-300)"
	check "$name: refused (exit 1, not killed by the timeout: $rc)" test "$rc" = 1
	check "$name: the error names the holder's pid $pid" grep -q "pid $pid" "$T/$name.log"
	rules >"$T/rules.$name"
	check "$name: the running router's rules are untouched" cmp -s "$T/rules.before" "$T/rules.$name"
	sleep 0.3
}
second same-config ''
second other-socket "s|^status_socket = .*|status_socket = \"$DIR/second.sock\"|"
second other-table "s|^status_socket = .*|status_socket = \"$DIR/second.sock\"|; s|^table = .*|table = 7100|"
second other-tun "s|^status_socket = .*|status_socket = \"$DIR/second.sock\"|; s|^tun = .*|tun = \"ftnet9\"|"

# (5) a TUN another program holds open (a multi-queue TUN accepts a second reader): refused too,
# naming that program's pid, although no ftnet lock stands in the way (another TUN and table).
ip netns exec "$RNS" python3 -c '
import fcntl, os, struct, sys, time
fd = os.open("/dev/net/tun", os.O_RDWR)
fcntl.ioctl(fd, 0x400454CA, struct.pack("16sH22x", b"ftnet5", 0x0001 | 0x1000 | 0x0100))  # TUNSETIFF: TUN, NO_PI, MULTI_QUEUE
open(sys.argv[1], "w").close()
time.sleep(30)' "$T/tun5.ready" &
HOLDER_PID=$!
wait_for 5 test -e "$T/tun5.ready" || die "could not open TUN ftnet5"
pid_saved=$pid
pid=$HOLDER_PID
second foreign-tun "s|^status_socket = .*|status_socket = \"$DIR/second.sock\"|; s|^table = .*|table = 7100|; s|^tun = .*|tun = \"ftnet5\"|"
pid=$pid_saved
kill "$HOLDER_PID" 2>/dev/null || true
wait "$HOLDER_PID" 2>/dev/null || true

kill -HUP "$pid"
say "sent SIGHUP to the router (pid $pid)"
sleep 1
still_pid=$(router_pid || echo none)
check "the router survived SIGHUP (process alive, status answers with pid $still_pid)" test "$still_pid" = "$pid" -a -d "/proc/$pid"
check "the router logged the reload: nothing to change" wait_for 3 grep -q "SIGHUP: reloaded .*: 0 replica(s) added, 0 removed, 0 change(s) not applied" "$LOG"
rules >"$T/rules.after-hup"
check "rules unchanged after SIGHUP" cmp -s "$T/rules.before" "$T/rules.after-hup"
sleep 1

touch "$T/probe.stop"
rc=0
wait "$PROBE_PID" || rc=$?
say "probes: $(cat "$T/probe.json")"
check_eq "every probe through the VIP answered" 0 "$rc"
alive=$(lab status --name "$LAB" --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print(all(r["alive"] for r in d["status"]["services"][0]["replicas"]))' 2>/dev/null || echo "no status")
check_eq "every replica alive" True "$alive"
# What `ftnet status --json` says of the router itself: its version, its role, when the snapshot
# was taken; the socket is root's (no status_group in the lab).
ver=$("$FTNET" --version | awk '{print $2}')
head=$(lab status --name "$LAB" --json | python3 -c 'import json,sys,time; d=json.load(sys.stdin); print(d["version"], d["role"], abs(time.time() * 1000 - d["timestamp_ms"]) < 5000)')
check_eq "status: version, role, a fresh timestamp" "$ver active True" "$head"
check_eq "status socket mode" 600 "$(stat -c %a "$DIR/router.sock")"
e2e_finish
