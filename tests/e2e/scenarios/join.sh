#!/usr/bin/env bash
# A stateful group heals with the group's state (issue 15): Redis × 3 under the shim, 20
# long-lived connections of writers (INCR/APPEND/LPUSH, every reply checked) plus a new short
# connection every 100 ms (joinload.py).
#
#  client ──veth── router (ftnet, sequencer) ──veth── r1, r2, r3 (redis under `ftnet run`)
#  (joinload)                                         a victim: killed (kill -9), then started
#                                                     again fresh and EMPTY (`ftnet lab restart`)
#
# join/n3-kill (a): ~3 s in the victim's Redis is killed: the router takes it out. ~2 s later a
# fresh, empty Redis is started there; its shim connects to the agent, and the replica JOINS with
# no operator action: the service's input pauses (zero window) until it is at rest and a serving
# replica's agent has forked its Redis (BGSAVE) at the paused input event; the router adds the
# joiner to every open connection there (a TCP connection of its own in the client's name, where
# the client's stream stands) and the input RESUMES while the file travels; the joiner's agent
# holds its server's input, restores the file (DEBUG RELOAD), the proofs (the file's SHA-256 and
# its keys) must be equal, and only then its server catches up on the held input and serves.
# join-outlive/n3-kill (c): the same, for r1, then r2, then r3, each replaced by a fresh replica
# that joins before the next kill: the 20 connections opened at the start outlive every replica
# they began with.
# Pass: 0 client errors, every counter exact; the router logs each join (one line); afterwards
# DEBUG DIGEST is equal on all three, and the joiner is in new connections. Figures: kill →
# serving again, and the pause clients saw. FTNET_E2E_JOIN_KEYS=K preloads K keys (DEBUG
# POPULATE through the VIP) to measure the pause against the state's size.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
NAME=${FTNET_E2E_JOIN_NAME:-join}
e2e_init "$NAME" "$@"
[[ $FAULT == kill && $N == 3 ]] || die "join runs with 3 replicas and a server kill"
if [[ $NAME == join-outlive ]]; then VICTIMS=(1 2 3); else VICTIMS=("$VICTIM"); fi
# join/n3-kill carries a state worth transferring (300 k keys, an ~11 MB RDB file): the clients'
# pause must not grow with it (it did, by ~1 s per 100 k keys, when the transfer was paused).
if [[ $NAME == join ]]; then KEYS=${FTNET_E2E_JOIN_KEYS:-300000}; else KEYS=${FTNET_E2E_JOIN_KEYS:-0}; fi
PAUSE_MAX_MS=1000

REDIS_PORT=6379
lab_up --port "$REDIS_PORT" --shim --failure-ms 1000
LOG=/run/ftnet/lab/$LAB/router.log
watch_stalls "$LOG"
state_of() { # state_of ADDR → "state alive connections"
	lab status --name "$LAB" --json | python3 -c "import json,sys; d=json.load(sys.stdin); r=[r for r in d['status']['services'][0]['replicas'] if r['addr'] == sys.argv[1]][0]; print(f\"{r['state']} {r['alive']} {r['connections']}\")" "$1"
}
if ((KEYS > 0)); then
	check "preload $KEYS keys" in_ns client redis-cli -h "$VIP" -p "$REDIS_PORT" DEBUG POPULATE "$KEYS" pre 64
	settle 1 2 3
fi

DURATION=$((6 + 6 * ${#VICTIMS[@]}))
timeout 300 "$FTNET" lab exec --name "$LAB" client -- \
	python3 "$E2E_DIR/joinload.py" --host "$VIP" --port "$REDIS_PORT" --conns 20 --duration "$DURATION" \
	--short-ms 100 >"$T/load.json" 2>"$T/load.err" &
load=$!

sleep 3
figures=()
windows=()
for V in "${VICTIMS[@]}"; do
	VADDR=$(replica_ip "$V")
	check "lab kill r$V" lab kill --name "$LAB" "$V"
	check "router declared r$V down" wait_for 5 bash -c "grep -q 'replica $VADDR declared down' '$LOG'"
	sleep 2
	# One crash is a handful of lines, not one per connection (each is at debug level): the
	# first connection's verdict, the replica declared down with the number of connections it
	# left, one summary of the other connections' verdicts.
	n=$(grep -E " WARN .*(replica $VADDR evicted|replica $VADDR declared down)" "$LOG" | wc -l)
	say "r$V's crash: $n warning line(s) about its evictions"
	check "r$V's crash logged in at most 4 lines (not one per connection)" test "$n" -le 4
	# The metrics endpoint (lab: metrics_listen 127.0.0.1:9100 in the router's namespace).
	metrics() { ip netns exec "ftnet-$LAB-router" curl -sS --max-time 5 "http://127.0.0.1:9100/$1"; }
	metrics metrics >"$T/metrics.down" 2>&1 || true
	check "metrics: r$V not up" grep -q "^ftnet_replica_up{service=\"lab\",replica=\"$VADDR\"} 0$" "$T/metrics.down"
	check "metrics: r$V's evictions counted" grep -Eq "^ftnet_evictions_total\{replica=\"$VADDR\",reason=\"[a-z_]+\"\} [1-9]" "$T/metrics.down"
	check "healthz: the data plane makes progress" bash -c "ip netns exec 'ftnet-$LAB-router' curl -sS --max-time 5 -f http://127.0.0.1:9100/healthz >/dev/null"
	t_restart=$(now_ms)
	check "lab restart r$V (fresh, empty)" lab restart --name "$LAB" "$V"
	joined_line() { grep -m1 "replica $VADDR JOINED" "$LOG"; }
	check "r$V joined by itself with the group's state" wait_for 60 joined_line
	line=$(joined_line || true)
	say "router: ${line:-<no line>}"
	if [[ -n $line ]]; then
		joined_ms=$(log_ms "$line")
		pause=$(sed -E 's/.*paused ([0-9]+) ms.*/\1/' <<<"$line")
		took=$(sed -E 's/.*join took ([0-9]+) ms.*/\1/' <<<"$line")
		conns=$(sed -E 's/.*part of ([0-9]+) connection.*/\1/' <<<"$line")
		say "r$V: restart → serving $((joined_ms - t_restart)) ms; input paused $pause ms of the join's $took ms; part of $conns connection(s)"
		check "r$V: the clients' input paused under $PAUSE_MAX_MS ms (${pause} ms) while $KEYS keys travelled" test "$pause" -lt "$PAUSE_MAX_MS"
		figures+=("r$V restart_to_serving_ms=$((joined_ms - t_restart)) pause_ms=$pause join_ms=$took connections=$conns keys=$KEYS")
		# Throughput over the whole join (pause, transfer, restore), not only the pause.
		windows+=("$V $joined_ms $took")
	fi
	sleep 1
done
{ grep -E "could NOT join" "$LOG" || true; } | head -5 | while read -r l; do say "router: $l"; done
printf '%s\n' "${figures[@]}" >"$T/figure.txt"

joinload_finish "$load"
for w in "${windows[@]}"; do
	read -r V end pause <<<"$w"
	rate=$(python3 "$E2E_DIR/joinrate.py" "$T/load.json" "$end" "$pause" 2>&1 || true)
	say "r$V join: $rate"
	echo "r$V $rate" >>"$T/figure.txt"
done

all=(1 2 3)
settle "${all[@]}"
same_digests "after the join" "${all[@]}"
# New connections include the joiners.
for V in "${VICTIMS[@]}"; do
	VADDR=$(replica_ip "$V")
	busy() { in_ns client redis-cli -h "$VIP" -p "$REDIS_PORT" INCR probe >/dev/null && [[ $(state_of "$VADDR") == serving\ True* ]]; }
	check "r$V serving and alive" wait_for 5 busy
	say "r$V: $(state_of "$VADDR")"
	check_eq "r$V joined once" 1 "$(grep -c "replica $VADDR JOINED" "$LOG")"
done
check "no join failed" bash -c "! grep -q 'could NOT join' '$LOG'"
metrics metrics >"$T/metrics.end" 2>&1 || true
for V in "${VICTIMS[@]}"; do
	VADDR=$(replica_ip "$V")
	check "metrics: r$V up again" grep -q "^ftnet_replica_up{service=\"lab\",replica=\"$VADDR\"} 1$" "$T/metrics.end"
	check "metrics: r$V's join counted" grep -q "^ftnet_joins_total{service=\"lab\",replica=\"$VADDR\",result=\"joined\"} 1$" "$T/metrics.end"
done
check "metrics: the join pauses in the histogram" grep -Eq "^ftnet_join_pause_milliseconds_count [1-9]" "$T/metrics.end"
e2e_finish
