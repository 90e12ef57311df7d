#!/usr/bin/env bash
# (l) Router high availability: two routers under keepalived's VRRP (lab --ha); the one holding
# the gateway addresses is killed with SIGKILL (`lab kill-router`, or its links cut with
# FAULT=cut: `lab cut-router`) TAKEOVERS times in a row during one load, the killed one coming
# back as backup in between (`lab restart-router`). The new master rebuilds its connection table
# from the agents' records and the next packets.
# Loads (TAKEOVER_LOAD, or the wrapper scripts takeover-*.sh):
#   get     1 GiB nginx download (curl, rate-capped so that it lasts through the takeovers):
#           curl exit 0, HTTP 200, sha256 equal
#   put     1 GiB WebDAV upload: curl exit 0, HTTP 201/204, every replica stores the right sha256
#   redis   redis-benchmark -c 20 (set,get,incr,lpush): exit 0, no error, counters exact through
#           the VIP and on every replica, DEBUG DIGEST equal
#   synack  a client's connection set up, the router killed before its first data, then the
#           data: the reply is right (once per takeover, a fresh connection each time)
#   stall   stallmeter.py's 4 KB/ms echo stream through every takeover: intact, and the
#           client-observed stall of each takeover (the longest gap around it) as the figure
#   connect connstorm.py: fresh connections set up all the time (4 in flight, each one echo)
#           through every takeover, so some are caught in every phase of their set-up: every
#           one completes with the right echo; figures: how many, connect() time median/max,
#           how many needed a second SYN (a SYN the dead router took)
# get and put also check that every takeover adopted the transfer's connection (it was still
# running). Also: no replica reset, every takeover completes (a master again within 2 s), and the figures
# (takeover_ms: kill to VRRP master; rebuild_ms: kill to every adopted connection rebuilt).
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
LOAD=${TAKEOVER_LOAD:-get}
e2e_init "takeover-$LOAD" "$@"
[[ $FAULT != none ]] || die "takeover runs with kill (kill-router) or cut (cut-router)"
TAKEOVERS=${FTNET_E2E_TAKEOVERS:-$(quick 4 10)}
GAP_MS=${FTNET_E2E_TAKEOVER_GAP_MS:-1200}   # between a takeover's end and the next kill

case $LOAD in
get | put)
	PORT=8080
	MB=$(quick 256 1024)
	TOTAL=$((MB * 1048576))
	big=$(e2e_data "rand-${MB}m" "$MB")
	if [[ $LOAD == get ]]; then
		lab_up --ha --port "$PORT" --server "$(nginx_server_cmd "$big")"
	else
		lab_up --ha --port "$PORT" --server "$(nginx_server_cmd "")"
	fi
	# Long enough for every takeover to land inside the transfer: each takes the gap plus about
	# 1.3 s (the switch, the rebuild, the killed router's restart), and there are some to spare.
	RATE=$((MB * 1000 / ((TAKEOVERS + 4) * (GAP_MS + 1300))))
	((RATE < 20)) && RATE=20
	;;
redis)
	PORT=6379
	REQS=$(quick 100000 200000)
	lab_up --ha --port "$PORT"
	;;
synack | stall | connect)
	PORT=7000
	lab_up --ha --port "$PORT" --server 'socat -t 60 TCP-LISTEN:{port},fork,reuseaddr EXEC:cat'
	;;
*) die "TAKEOVER_LOAD must be get, put, redis, synack, stall or connect, got '$LOAD'" ;;
esac
LOGDIR=/run/ftnet/lab/$LAB
active() { lab status --name "$LAB" | awk '/router holding the addresses/ { print $NF; exit }'; }
counter() { # counter NAME — from the active router's status
	lab status --name "$LAB" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['status']['counters'].get('$1', 0))"
}

# One takeover: kill (or cut) the master, wait until the other holds the addresses and has
# rebuilt every connection it adopted, bring the first back. Appends figures to $T/figures.
takeover() {
	local k=$1 before after t0 t1 t2 adopted rebuilt
	before=$(active)
	t0=$(now_ms)
	lab "${FAULT}-router" --name "$LAB" >>"$T/fault.out" 2>&1 || { say "takeover $k: ${FAULT}-router failed"; return 1; }
	wait_for 3 bash -c "[[ \$('$FTNET' lab status --name '$LAB' 2>/dev/null | awk '/router holding the addresses/ { print \$NF; exit }') != '$before' ]]" || true
	after=$(active)
	t1=$(now_ms)
	if [[ -z $after || $after == "$before" ]]; then
		say "takeover $k: no new master within 3 s (was $before)"
		return 1
	fi
	# keepalived's own record of the moment it became master (notify_master), more exact than
	# this loop's polling.
	local tm
	tm=$(tail -n1 "$LOGDIR/$after.master" 2>/dev/null || true)
	[[ $tm =~ ^[0-9]+$ ]] && ((tm >= t0 && tm <= t1)) && t1=$tm
	# Rebuilt: connections adopted, and none still waiting for a replica's position.
	rebuilt_all() {
		lab status --name "$LAB" --json | python3 -c "import json,sys; s=json.load(sys.stdin)['status']; sys.exit(0 if s['counters'].get('connections_adopted', 0) > 0 and s.get('rebuilding', 1) == 0 else 1)"
	}
	wait_for 5 rebuilt_all || true
	t2=$(now_ms)
	# The router's own record of it ("table rebuilt"), more exact than this loop's polling.
	local tr line
	line=$(grep 'table rebuilt' "$LOGDIR/$after.log" 2>/dev/null | tail -n1 || true)
	tr=$(date -u -d "$(cut -d' ' -f1 <<<"$line")" +%s%3N 2>/dev/null || true)
	[[ $tr =~ ^[0-9]+$ ]] && ((tr >= t0 && tr <= t2)) && t2=$tr
	adopted=$(counter connections_adopted)
	rebuilt=$(counter connections_rebuilt)
	say "takeover $k: $before -> $after in $((t1 - t0)) ms; $adopted connection(s) adopted, $rebuilt rebuilt $((t2 - t0)) ms after the $FAULT"
	echo "takeover=$k takeover_ms=$((t1 - t0)) rebuild_ms=$((t2 - t0)) adopted=$adopted rebuilt=$rebuilt kill_epoch_ms=$t0" >>"$T/figures"
	lab restart-router --name "$LAB" >>"$T/fault.out" 2>&1 || { say "takeover $k: restart-router failed: $(tail -3 "$T/fault.out")"; return 1; }
}

takeovers() { # in the background, during the load: TAKEOVERS in a row
	sleep 1
	local k
	for ((k = 1; k <= TAKEOVERS; k++)); do
		takeover "$k" || { echo "failed at $k" >"$T/takeovers.failed"; return 1; }
		sleep "$(python3 -c "print($GAP_MS / 1000)")"
	done
	echo done >"$T/takeovers.done"
	# A load that should end soon after the last takeover but hangs leaves its state behind.
	watch_load 15 45
}

t_load=$(now_ms)
case $LOAD in
get)
	out=$T/big.bin
	takeovers &
	WATCHER_PID=$!
	rc=0
	code=$(timeout 900 "$FTNET" lab exec --name "$LAB" client -- \
		curl -sS --max-time 880 --limit-rate "${RATE}M" -o "$out" -w '%{http_code}' "http://$VIP:$PORT/big.bin" 2>"$T/client.err") || rc=$?
	touch "$T/load.done"
	wait "$WATCHER_PID" || true
	WATCHER_PID=
	[[ -s $T/client.err ]] && say "client stderr: $(head -c 2000 "$T/client.err")"
	check_eq "curl exit status" 0 "$rc"
	check_eq "HTTP status" 200 "$code"
	check_eq "downloaded sha256" "$(sha "$big")" "$(sha "$out")"
	;;
put)
	takeovers &
	WATCHER_PID=$!
	rc=0
	code=$(timeout 900 "$FTNET" lab exec --name "$LAB" client -- \
		curl -sS --max-time 880 --limit-rate "${RATE}M" -T "$big" -o "$T/response.txt" -w '%{http_code}' \
		"http://$VIP:$PORT/upload/x.bin" 2>"$T/client.err") || rc=$?
	touch "$T/load.done"
	wait "$WATCHER_PID" || true
	WATCHER_PID=
	[[ -s $T/client.err ]] && say "client stderr: $(head -c 2000 "$T/client.err")"
	check_eq "curl exit status" 0 "$rc"
	check "HTTP status is 201 or 204 (got '$code')" test "$code" = 201 -o "$code" = 204
	want=$(sha "$big")
	for ((r = 1; r <= N; r++)); do
		f=$(replica_dir "$r")/www/upload/x.bin
		if wait_for 30 test "$(stat -c %s "$f" 2>/dev/null)" = "$TOTAL"; then
			check_eq "r$r stored file sha256" "$want" "$(sha "$f")"
		else
			check "r$r has $f" false
		fi
	done
	;;
redis)
	takeovers &
	WATCHER_PID=$!
	rc=0
	timeout 900 "$FTNET" lab exec --name "$LAB" client -- \
		redis-benchmark -h "$VIP" -p "$PORT" -c 20 -n "$REQS" -t set,get,incr,lpush -q >"$T/bench.out" 2>&1 || rc=$?
	touch "$T/load.done"
	wait "$WATCHER_PID" || true
	WATCHER_PID=
	tr '\r' '\n' <"$T/bench.out" | grep -v 'rps=' | grep -v '^ *$' | sed 's/^/    /' || true
	check_eq "redis-benchmark exit status" 0 "$rc"
	check "no error in redis-benchmark output" \
		bash -c "! grep -Eiq 'error|reset|refused|timed out|timeout|closed|broken' '$T/bench.out'"
	check_eq "completed tests" 4 "$(tr '\r' '\n' <"$T/bench.out" | grep -c 'requests per second' || true)"
	vip() { timeout 20 "$FTNET" lab exec --name "$LAB" client -- redis-cli -h "$VIP" -p "$PORT" "$@"; }
	check_eq "INCR counter through the VIP" "$REQS" "$(vip GET 'counter:__rand_int__' | tr -d '\r')"
	check_eq "LPUSH list length through the VIP" "$REQS" "$(vip LLEN mylist | tr -d '\r')"
	first=
	for ((r = 1; r <= N; r++)); do
		wait_for 10 test "$(redis_at "$r" GET 'counter:__rand_int__' | tr -d '\r')" = "$REQS" || true
		check_eq "r$r INCR counter" "$REQS" "$(redis_at "$r" GET 'counter:__rand_int__' | tr -d '\r')"
		d=$(redis_at "$r" DEBUG DIGEST | tr -d '\r')
		say "r$r DEBUG DIGEST $d"
		if [[ -z $first ]]; then first=$d; else check_eq "r$r digest equals r1's" "$first" "$d"; fi
	done
	;;
stall)
	dur=$((TAKEOVERS * 3 + 4))
	rc=0
	timeout $((dur + 60)) "$FTNET" lab exec --name "$LAB" client -- \
		python3 "$E2E_DIR/stallmeter.py" --host "$VIP" --port "$PORT" --chunk 4096 --interval-ms 1 \
		--duration "$dur" --warmup 0.5 >"$T/stall.json" 2>"$T/stall.err" &
	meter=$!
	takeovers
	wait "$meter" || rc=$?
	touch "$T/load.done"
	[[ -s $T/stall.err ]] && say "stallmeter stderr: $(head -c 2000 "$T/stall.err")"
	check_eq "stallmeter exit status (echo stream intact)" 0 "$rc"
	python3 - "$T/stall.json" "$T/figures" "$E2E_TEST" <<'PY' | tee -a "$T/stalls.txt"
import json, statistics, sys
r = json.load(open(sys.argv[1]))
kills = [int(dict(kv.split("=") for kv in l.split())["kill_epoch_ms"]) / 1000 for l in open(sys.argv[2])]
gaps = r.get("top_gaps", [])
per = []
for k in kills:
    near = [g for g, s in gaps if s <= k + 2.0 and s + g / 1000 >= k]
    per.append(max(near) if near else 0)
print(f"{sys.argv[3]}: client-observed stall per takeover (ms, longest echo gap around each kill): {per}; median {statistics.median(per)} max {max(per)}; echo intact {r['echo_intact']}")
open(sys.argv[1] + ".median", "w").write("%d\n" % statistics.median(per))
# All but the longest: one takeover of ten may meet a loaded CI machine's hiccup.
open(sys.argv[1] + ".second", "w").write("%d\n" % sorted(per)[-2] if len(per) > 1 else "%d\n" % max(per))
PY
	# The bar of MISSION.md: a router's loss costs a client less than 500 ms. Asserted on the
	# median of the takeovers and on every takeover but the longest (one of ten may meet a loaded
	# CI machine's hiccup), after a kill and after a cut: ~210 ms here, the endpoints' first
	# retransmission (200 ms RTO minimum). After a cut the new master holds the address after
	# three missed VRRP adverts (~0.1-0.19 s) and the agents give the silent router up after
	# 150 ms; a client's first resend that lands before their records is kept and replayed into
	# the rebuilt connection (before that, 3 of 10 cuts cost ~415 ms: the resend was lost and the
	# next came 400 ms after it; before the prompts of a rebuilt connection, ~640 ms).
	med=$(cat "$T/stall.json.median" 2>/dev/null || echo "")
	second=$(cat "$T/stall.json.second" 2>/dev/null || echo "")
	bar=500
	check "the takeover stalls were measured" test -n "$med"
	[[ -n $med ]] && check "median client-visible stall per takeover ${med} ms <= ${bar} ms (fault $FAULT)" test "$med" -le "$bar"
	[[ -n $second ]] && check "every takeover but the longest stalled the client <= ${bar} ms (second longest ${second} ms, fault $FAULT)" test "$second" -le "$bar"
	;;
connect)
	dur=$((TAKEOVERS * 8 + 10))
	rc=0
	timeout $((dur + 60)) "$FTNET" lab exec --name "$LAB" client -- \
		python3 "$E2E_DIR/connstorm.py" --host "$VIP" --port "$PORT" --duration "$dur" --inflight 4 \
		--timeout 20 --stop-file "$T/storm.stop" >"$T/storm.json" 2>"$T/storm.err" &
	storm=$!
	takeovers || true
	sleep 1
	touch "$T/storm.stop"
	wait "$storm" || rc=$?
	touch "$T/load.done"
	[[ -s $T/storm.err ]] && say "connstorm stderr: $(head -c 2000 "$T/storm.err")"
	say "connections across the takeovers: $(cat "$T/storm.json")"
	check_eq "connstorm exit status (every connection set up and echoed)" 0 "$rc"
	check "connstorm set up connections throughout" python3 -c "import json,sys; sys.exit(0 if json.load(open('$T/storm.json'))['ok'] >= 20 * $TAKEOVERS else 1)"
	python3 -c "import json; r=json.load(open('$T/storm.json')); print('$E2E_TEST: %d connections set up during %d takeovers, %d failed; connect() ms median %s max %s; %d needed a second SYN' % (r['total'], $TAKEOVERS, r['failed'], r['connect_ms_median'], r['connect_ms_max'], r['connects_over_900ms']))" | tee -a "$T/stalls.txt"
	;;
synack)
	# Each round: a connection set up (handshake done, nothing sent), the router killed, then the
	# client's first data after the takeover; the echo must come back whole.
	for ((k = 1; k <= TAKEOVERS; k++)); do
		msg="hello after takeover $k $(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
		timeout 30 "$FTNET" lab exec --name "$LAB" client -- python3 -c '
import socket, sys, time, os
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
open(sys.argv[3], "w").write("connected\n")
while not os.path.exists(sys.argv[4]):
    time.sleep(0.01)
s.sendall(sys.argv[5].encode())
s.shutdown(socket.SHUT_WR)
got = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    got += b
print(got.decode(), end="")
' "$VIP" "$PORT" "$T/connected.$k" "$T/go.$k" "$msg" >"$T/echo.$k" 2>"$T/echo.$k.err" &
		cpid=$!
		wait_for 10 test -e "$T/connected.$k" || true
		takeover "$k" || echo "failed at $k" >"$T/takeovers.failed"
		touch "$T/go.$k"
		rc=0
		wait "$cpid" || rc=$?
		check_eq "round $k: client exit status" 0 "$rc"
		check_eq "round $k: echo after the takeover" "$msg" "$(cat "$T/echo.$k")"
		[[ -s $T/echo.$k.err ]] && say "round $k client stderr: $(head -c 500 "$T/echo.$k.err")"
		sleep 0.3
	done
	echo done >"$T/takeovers.done"
	;;
esac
say "load took $(($(now_ms) - t_load)) ms"
check "all $TAKEOVERS takeovers completed" test -e "$T/takeovers.done"
n_to=$(grep -c '^takeover=' "$T/figures" 2>/dev/null || true)
check_eq "takeovers measured" "$TAKEOVERS" "$n_to"
if [[ $LOAD == get || $LOAD == put ]]; then
	check_eq "takeovers that adopted the running transfer" "$TAKEOVERS" "$(grep -c 'adopted=[1-9]' "$T/figures" || true)"
fi
if [[ -s $T/figures ]]; then
	python3 - "$T/figures" "$E2E_TEST" <<'PY' | tee "$T/figure.txt"
import re, statistics, sys
rows = [dict(kv.split("=") for kv in l.split()) for l in open(sys.argv[1])]
t = [int(r["takeover_ms"]) for r in rows]
b = [int(r["rebuild_ms"]) for r in rows]
print(f"{sys.argv[2]}: {len(rows)} takeovers; kill to new VRRP master ms: median {statistics.median(t)} max {max(t)}; kill to table rebuilt ms: median {statistics.median(b)} max {max(b)} (advert_int 0.05 s, VRRPv3)")
PY
	[[ -n ${FTNET_E2E_FIGURES:-} ]] && flock "$FTNET_E2E_FIGURES" cat "$T/figure.txt" >>"$FTNET_E2E_FIGURES"
fi
# Replicas evicted across the takeovers (a replica that misses a takeover's rebuild loses its
# place in the connection; the client does not notice, but the group is smaller): reported.
grep -h "evicted\|declared down" "$LOGDIR"/router*.log* >"$T/evictions.txt" 2>/dev/null || true
say "replica evictions across the takeovers: $(wc -l <"$T/evictions.txt")"
head -3 "$T/evictions.txt"
echo "$E2E_TEST evictions=$(wc -l <"$T/evictions.txt")" >>"$T/figure.txt"
check "no client reset across the takeovers" bash -c "! grep -qh 'client reset' '$LOGDIR'/router*.log*"
if [[ ${FTNET_E2E_SHIM:-0} == 1 ]]; then
	# The input order survived every takeover: no shim saw a break in it and gave up, none had to
	# hand out a connection without its accept event.
	for ((r = 1; r <= N; r++)); do
		check "r$r's shim kept the router's order through the takeovers" \
			bash -c "! grep -Eh 'follows the kernel.s order|handed out unordered' '$(replica_dir "$r")/server.log'"
	done
fi
e2e_finish
