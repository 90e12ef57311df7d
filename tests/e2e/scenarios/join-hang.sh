#!/usr/bin/env bash
# A replica whose server hangs is taken out and comes back by itself with the group's state
# (issue 15: process failures heal with no operator action): Redis × 3 under
# `ftnet run --supervise`, agents with `--end-stale-servers`, 20 long-lived connections of writers
# (INCR/APPEND/LPUSH, every reply checked) plus a new short connection every 100 ms (joinload.py).
#
#  client ──veth── router (ftnet, sequencer) ──veth── r1, r2, r3 (redis under `ftnet run --supervise`)
#  (joinload)                                         the victim's redis-server stopped (SIGSTOP)
#
# The victim's redis-server is stopped with SIGSTOP while the writes go on: its kernel still
# acknowledges, its agent stays connected, only its replies stop. The router's failure detection
# takes it out (stalled: no progress while the others progress) and, since its servers miss input
# from then on while the others serve, tells its agent at once to end them; the agent kills the
# hung server, its supervisor starts a fresh one, which joins with the group's state (checkpoint,
# restore, equal digests) and into every open connection. Without the router's request the hung
# server would stay stopped, the replica out, for good.
# Pass: the router logs the replica taken out, its server stale, and the join (one line each);
# the hung process is gone; 0 client errors, every counter exact; DEBUG DIGEST equal on all three
# afterwards; the victim serves new connections.
# Figures: server hung → taken out; server hung → serving again.
#
# hang-writers/n3-hang (FTNET_E2E_HANG_NAME=hang-writers, no short connections): only the 20
# writers, which never wait for the hung replica (the others answer first), so its kernel goes on
# acknowledging their commands; its output alone stands still. It must be taken out within 10× the
# detection time (3 s) plus 2 s, like with the short connections: it used to stay in for tens of
# seconds, until its full receive window stopped the input of every replica.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
NAME=${FTNET_E2E_HANG_NAME:-join-hang}
SHORT_MS=100
[[ $NAME == hang-writers ]] && SHORT_MS=0
e2e_init "$NAME" "$@"
[[ $FAULT == hang && $N == 3 ]] || die "join-hang runs with 3 replicas and a hung server"
REDIS_PORT=6379
lab_up --port "$REDIS_PORT" --supervise --failure-ms 300
LOG=/run/ftnet/lab/$LAB/router.log
VADDR=$(replica_ip "$VICTIM")
server_pid() { # the victim's redis-server
	local p
	for p in $(ip netns pids "ftnet-$LAB-r$VICTIM" 2>/dev/null); do
		[[ $(cat "/proc/$p/comm" 2>/dev/null) == redis-server ]] && { echo "$p"; return 0; }
	done
	return 1
}

timeout 300 "$FTNET" lab exec --name "$LAB" client -- \
	python3 "$E2E_DIR/joinload.py" --host "$VIP" --port "$REDIS_PORT" --conns 20 --duration 20 \
	--short-ms "$SHORT_MS" >"$T/load.json" 2>"$T/load.err" &
load=$!

sleep 3
pid=$(server_pid) || die "no redis-server in r$VICTIM"
kill -STOP "$pid"
t_hang=$(now_ms)
say "FAULT injected: r$VICTIM's redis-server (pid $pid) stopped with SIGSTOP under writes; its kernel and agent stay up"
down_line() { grep -m1 "replica $VADDR declared down" "$LOG"; }
check "router took r$VICTIM out" wait_for 20 down_line
line=$(down_line || true)
say "router: ${line:-<no line>}"
[[ -n $line ]] && down_ms=$(log_ms "$line")
# Stalled: no output for 10× the detection time (300 ms) while the others answer.
check "r$VICTIM taken out within 5000 ms of the hang (10x the detection time, plus 2 s)" \
	test "$((${down_ms:-$((t_hang + 99999))} - t_hang))" -le 5000
check "the hung server (pid $pid) was ended" wait_for 10 bash -c "! kill -0 $pid 2>/dev/null"
kill -CONT "$pid" 2>/dev/null || true
stale_server_rejoins
if [[ -n $joined_ms && -n ${down_ms:-} ]]; then
	say "r$VICTIM: server hung → taken out $((down_ms - t_hang)) ms, → serving $((joined_ms - t_hang)) ms; input paused $pause ms"
	echo "r$VICTIM hang_to_down_ms=$((down_ms - t_hang)) hang_to_serving_ms=$((joined_ms - t_hang)) pause_ms=$pause" >"$T/figure.txt"
fi

joinload_finish "$load"

rejoined_serves
e2e_finish
