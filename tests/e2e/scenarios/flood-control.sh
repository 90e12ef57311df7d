#!/usr/bin/env bash
# Floods against the router's control port (where agents register, 198.18.1.1:7400 from the client
# namespace), and an agent that stops reading, while a legitimate client is measured. socat echo ×
# 3, stateless, agents on every replica (heartbeat 100 ms, dead_after 500 ms, commit wait 100 ms:
# the lab's defaults). One kind after the other (flood.py), each FTNET_E2E_FLOOD_SECONDS (4 s):
#   ctl-syn     FTNET_E2E_FLOOD_PPS (5,000) SYNs/s to the control port, never completed (from
#               addresses of the client's subnet nobody holds: the router's SYN-ACKs go nowhere);
#   ctl-conn    FTNET_E2E_CTL_CONN_RATE (1,000) real connections/s to the control port, at most
#               2,000 open at once, each silent, a frame cut short, a length prefix far beyond any
#               frame, or garbage, held until the router closes it: far more than the router's 256
#               sessions, so they are full all the time;
#   agent-stop  no packets: r2's agent stopped (SIGSTOP: it neither reads nor heartbeats, its
#               kernel still takes the router's bytes until its buffers fill) for dead_after + 2 s,
#               then continued (SIGCONT).
# During ctl-syn and ctl-conn r3's agent is killed (SIGKILL) and started again with its command
# line, FTNET_E2E_CTL_RESTARTS (2) times each: a real agent that reconnects must get in past the
# flood. Meanwhile the legitimate client echoes 64 bytes every 5 ms on one connection and opens a
# fresh connection every 100 ms (whose SYN-ACK waits for the agents to store its record, the
# commit wait); the router's RSS and threads are sampled every 100 ms, the agents every 200 ms.
#
# What the router should do with an agent that stops: it must not stall the data plane or the
# other agents (its session has a thread of its own; records go to a bounded queue, written by
# another thread with a 2 s write timeout); a SYN-ACK waits for the stopped agent at most the
# commit wait (100 ms), and once the agent has been silent for dead_after its host is declared
# lost (one line with the reason), the replica is taken out of every connection and the SYN-ACKs
# no longer wait for it. The service being stateless, the router's health probe takes the replica
# back as soon as its server answers, which it does all along (only its agent stopped): that may
# be before the agent runs again. After SIGCONT the agent finds its session ended, reconnects and
# registers again. (A stateful service keeps such a replica out until a join or `ftnet replica
# enable`: its server may have missed input while it was out.)
#
# Pass, per kind: the legitimate client was served throughout (every echo exact, no fresh
# connection failed); echo round trip p99 under 200 ms (FTNET_E2E_FLOOD_P99_MS, as flood.sh); the
# flood ran (at least half its rate). ctl-*: r1's and r2's agents registered at every sample, each
# restarted r3 agent registered within 2 s on its first attempt (the router refused none of its
# connections), all three registered at the end, nobody declared down; fresh connections within
# 300 ms (the commit wait, 100 ms, plus a margin for a loaded 2-core machine). agent-stop: r2's
# host declared lost with its reason within dead_after + 400 ms of the stop, r2 declared down as
# host lost, nobody else lost or down, r1's and r3's agents registered at every sample; no fresh
# connection took longer than the commit wait + 200 ms (a SYN-ACK never waits for a stopped agent
# longer than the commit wait, nor past dead_after); r2's agent registered again within 3 s of
# SIGCONT and r2 serves again: a fresh connection afterwards is served by all three replicas.
# Per kind at most 200 router log lines. Throughout: the router runs, no panic, RSS peak under 256 MiB, threads at most 256 sessions +
# 16 over the start, no log line over 2,000 bytes. Figures per kind: rate held, echo p50/p99/max,
# fresh ok/failed and p50/p99/max, RSS and threads peaks, what the router (and its kernel) counted.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init flood-control "$@"
[[ $FAULT == none ]] || die "flood-control runs without a fault"
((N == 3)) || die "flood-control runs with 3 replicas"
PPS=${FTNET_E2E_FLOOD_PPS:-5000}
SECS=${FTNET_E2E_FLOOD_SECONDS:-4}
CONN_RATE=${FTNET_E2E_CTL_CONN_RATE:-1000}
RESTARTS=${FTNET_E2E_CTL_RESTARTS:-2}
P99_BAR=${FTNET_E2E_FLOOD_P99_MS:-200}
DEAD_AFTER_MS=500 COMMIT_WAIT_MS=100
FRESH_BAR=$((COMMIT_WAIT_MS + 200))

PORT=7000
lab_up --port "$PORT" --agents --stateless --server "socat -t 60 TCP-LISTEN:{port},fork,reuseaddr EXEC:cat"
DIR=/run/ftnet/lab/$LAB
LOG=$DIR/router.log
R1=$(replica_ip 1) R2=$(replica_ip 2) R3=$(replica_ip 3)
status_json() { lab status --name "$LAB" --json 2>/dev/null; }
pid=$(status_json | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
say "router pid $pid"
proc_status() { awk '/^VmRSS/ {r=$2} /^Threads/ {t=$2} END {print r+0, t+0}' "/proc/$pid/status" 2>/dev/null || echo "0 0"; }
read -r rss0 threads0 < <(proc_status)
registered() { # the replicas whose agents are registered, space-separated
	status_json | python3 -c 'import json,sys; print(" ".join(sorted(a["replica"] for a in json.load(sys.stdin)["control"]["agents"] if a["state"] == "registered")))'
}
check_eq "three agents registered at the start" "$R1 $R2 $R3" "$(registered)"
# What the router counted (drops, control counters, SYN-ACKs with and without the agents'
# confirmation) and what its kernel counted on the control port's listener, as one JSON object.
counted() {
	local nst
	nst=$(ip netns exec "ftnet-$LAB-router" nstat -asz 2>/dev/null | awk '{printf "%s=%s ", $1, $2}')
	status_json | python3 -c '
import json, sys
d = json.load(sys.stdin); s = d["status"]; c = s["counters"]; ctl = d["control"]
out = {k: v for k, v in s["drops"]}
out.update({k: c[k] for k in ("packets_in", "synacks_committed", "synacks_uncommitted") if k in c})
for k in ("refused_connections", "refused_unknown", "refused_per_address", "dropped_records", "rejected_frames"):
    if k in ctl:
        out["control_" + k] = ctl[k]
for kv in sys.argv[1].split():
    k, v = kv.split("=")
    if k in ("TcpExtListenOverflows", "TcpExtListenDrops", "TcpExtSyncookiesSent", "TcpExtSyncookiesRecv",
             "TcpExtTCPReqQFullDoCookies", "TcpExtTCPReqQFullDrop", "TcpPassiveOpens", "TcpAttemptFails"):
        out["kernel_" + k] = int(v)
print(json.dumps(out))' "$nst"
}

# restart_r3 K — kill r3's agent (SIGKILL) and start it again with the same command line; its log
# in $T/r3-agent-K.log. Records the kill time in $T/r3-kill-K.
restart_r3() {
	local k=$1 apid args
	apid=$(cat "$DIR/r3/agent.pid")
	args=$(tr '\0' '\n' <"/proc/$apid/cmdline")
	mapfile -t argv <<<"$args"
	now_ms >"$T/r3-kill-$k"
	kill -KILL "$apid"
	# Gone, or a zombie its parent has not reaped yet (kill -0 still finds those) whose other
	# threads have all ended (the last one closes its sockets: the shim socket it listens on).
	dead() {
		[[ ! -e /proc/$apid ]] ||
			[[ $(awk '{print $3}' "/proc/$apid/stat" 2>/dev/null) == Z && $(ls "/proc/$apid/task" 2>/dev/null | wc -l) -le 1 ]]
	}
	until dead; do sleep 0.01; done
	ip netns exec "ftnet-$LAB-r3" "${argv[@]}" >"$T/r3-agent-$k.log" 2>&1 &
	echo $! >"$DIR/r3/agent.pid"
	disown
}
r3_registered_lines() { grep -c "agent registered.*replica=$R3\|replica=$R3.*agent registered" "$LOG" || true; }

: >"$T/figures.txt"
rss_peak_all=$rss0 threads_peak_all=$threads0
for kind in ctl-syn ctl-conn agent-stop; do
	counted >"$T/before-$kind.json"
	log_lines0=$(wc -l <"$LOG")
	rm -f "$T/stop-$kind"
	(
		rp=0 tp=0
		while [[ -d $T && ! -e $T/stop-$kind ]]; do
			read -r r t < <(proc_status)
			((r > rp)) && rp=$r
			((t > tp)) && tp=$t
			echo "$rp $tp" >"$T/peak-$kind"
			sleep 0.1
		done
	) &
	sampler=$!
	(
		while [[ -d $T && ! -e $T/stop-$kind ]]; do
			if r=$(registered); then echo "$(now_ms) $r" >>"$T/agents-$kind.txt"; fi
			sleep 0.2
		done
	) &
	agent_sampler=$!
	# Ended by the cleanup too, should the scenario stop early.
	echo "$sampler $agent_sampler" >>"$T/watchers.pid"
	fkind=$kind secs=$SECS
	if [[ $kind == agent-stop ]]; then
		fkind=none
		secs=$(((DEAD_AFTER_MS + 2000) / 1000 + 3))
	fi
	timeout $((secs * 3 + 30)) "$FTNET" lab exec --name "$LAB" client -- \
		python3 "$E2E_DIR/flood.py" --vip "$VIP" --port "$PORT" --kind "$fkind" --pps "$PPS" --seconds "$secs" \
		--ctl 198.18.1.1:7400 --conn-rate "$CONN_RATE" --max-open 2000 \
		>"$T/flood-$kind.json" 2>"$T/flood-$kind.err" &
	flood_pid=$!
	restart_ok=1 restart_ms=()
	case $kind in
	ctl-syn | ctl-conn)
		# r3's agent killed and started again, RESTARTS times spread over the flood.
		t_flood=$(now_ms)
		for ((k = 1; k <= RESTARTS; k++)); do
			until (($(now_ms) >= t_flood + k * SECS * 1000 / (RESTARTS + 1))); do sleep 0.02; done
			before=$(r3_registered_lines)
			restart_r3 "$kind-$k"
			back() { (($(r3_registered_lines) > before)); }
			if wait_for 2 back; then
				line=$(grep "agent registered" "$LOG" | grep "$R3" | tail -1)
				restart_ms+=($(($(log_ms "$line") - $(cat "$T/r3-kill-$kind-$k"))))
			else
				restart_ok=0
				restart_ms+=(none)
			fi
			# The restarted agent's connections the router closed before it registered.
			if grep -Eq "control connection to|refused|cannot reach" "$T/r3-agent-$kind-$k.log"; then
				say "$kind: restarted r3 agent $k needed more than one attempt: $(grep -E 'control connection to|refused|cannot reach' "$T/r3-agent-$kind-$k.log" | head -3 | cut -c1-300)"
				restart_ok=0
			fi
		done
		;;
	agent-stop)
		sleep 1
		apid=$(cat "$DIR/r2/agent.pid")
		t_stop=$(now_ms)
		kill -STOP "$apid"
		sleep "$(python3 -c "print(($DEAD_AFTER_MS + 2000) / 1000)")"
		t_cont=$(now_ms)
		kill -CONT "$apid"
		;;
	esac
	rc=0
	wait "$flood_pid" || rc=$?
	touch "$T/stop-$kind"
	wait "$sampler" "$agent_sampler" || true
	counted >"$T/after-$kind.json"
	read -r rss_peak threads_peak <"$T/peak-$kind" || { rss_peak=0 threads_peak=0; }
	((rss_peak > rss_peak_all)) && rss_peak_all=$rss_peak
	((threads_peak > threads_peak_all)) && threads_peak_all=$threads_peak
	log_lines=$(($(wc -l <"$LOG") - log_lines0))
	[[ -s $T/flood-$kind.err ]] && say "$kind stderr: $(head -c 1500 "$T/flood-$kind.err")"
	fig=$(python3 - "$T/flood-$kind.json" "$T/before-$kind.json" "$T/after-$kind.json" "$rss_peak" "$threads_peak" "$log_lines" "$kind" "${restart_ms[*]:-}" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
b, a = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
delta = {k: a[k] - b.get(k, 0) for k in a if a[k] - b.get(k, 0) > 0 and k != "packets_in"}
kind = sys.argv[7]
if kind == "ctl-syn":
    rate = f"{r['sent']} SYNs at {r['pps']}/s (target {r['target_pps']})"
elif kind == "ctl-conn":
    c = r["conns"]
    rate = (f"{r['sent']} connections at {r['pps']}/s: {c['connected']} connected, {c['connect_failed']} failed, "
            f"{c['answered']} answered, closed by the router at once {c['closed_at_once']} "
            f"({json.dumps(c['at_once_by_mode'])}) and later {c['closed_later']} (lifetime p50 "
            f"{c['lifetime_p50_ms']} max {c['lifetime_max_ms']} ms), {c['reset']} reset, at most {c['max_open']} open, "
            f"{c['open_at_end']} open at the end")
else:
    rate = "no packets (r2's agent stopped)"
restarts = f"; r3 agent re-registered after kill in {sys.argv[8]} ms" if sys.argv[8] else ""
print(f"{kind}: {rate}; legitimate echo round trip p50 {r['rtt_p50_ms']} p99 {r['rtt_p99_ms']} "
      f"max {r['rtt_max_ms']} ms over {r['rtt_n']} echoes, {len(r['errors'])} errors; fresh connections "
      f"{r['fresh_ok']} ok {r['fresh_failed']} failed, p50 {r['fresh_p50_ms']} p99 {r['fresh_p99_ms']} max "
      f"{r['fresh_max_ms']} ms; router RSS peak {int(sys.argv[4]) // 1024} MiB, threads peak {sys.argv[5]}; "
      f"{sys.argv[6]} log lines{restarts}; counted: {json.dumps(delta)}")
PY
	) || fig="$kind: no result ($(head -c 300 "$T/flood-$kind.json"))"
	say "FIGURE flood-control $fig"
	echo "$fig" >>"$T/figures.txt"
	jq_() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if ($1) else 1)" "$T/flood-$kind.json"; }
	check "$kind: the legitimate client was served throughout (echoes exact, fresh connections answered)" test "$rc" = 0
	check "$kind: echo round trip p99 under $P99_BAR ms" jq_ "r['rtt_p99_ms'] is not None and r['rtt_p99_ms'] < $P99_BAR"
	check "$kind: every fresh connection within $FRESH_BAR ms (commit wait $COMMIT_WAIT_MS ms + 200)" jq_ "r['fresh_max_ms'] is not None and r['fresh_max_ms'] < $FRESH_BAR"
	# Peers refused before they registered are logged a few a second at most (a flood of them
	# used to log a line each: ~1,800 lines in the 4 s of ctl-conn).
	check "$kind: $log_lines log lines, at most 200" test "$log_lines" -le 200
	# The agents that must have stayed registered at every sample.
	case $kind in
	agent-stop) stay=("$R1" "$R3") ;;
	*) stay=("$R1" "$R2") ;;
	esac
	for a in "${stay[@]}"; do
		check "$kind: $a's agent registered at every sample ($(wc -l <"$T/agents-$kind.txt") samples)" \
			awk -v a="$a" '{ f = 0; for (i = 2; i <= NF; i++) if ($i == a) f = 1; if (!f) bad = 1 } END { exit bad }' "$T/agents-$kind.txt"
	done
	case $kind in
	ctl-syn)
		check "ctl-syn: the flood ran (at least half of $PPS/s sent)" jq_ "r['pps'] >= $PPS // 2"
		;;
	ctl-conn)
		check "ctl-conn: the flood ran (at least half of $CONN_RATE connections/s opened)" jq_ "r['pps'] >= $CONN_RATE // 2"
		check "ctl-conn: the router's places were full (silent connections closed at once: the ones it had no place for)" jq_ "r['conns']['at_once_by_mode']['silent'] > 0"
		;;
	esac
	case $kind in
	ctl-syn | ctl-conn)
		check "$kind: r3's agent, killed and started again $RESTARTS times, registered each time within 2 s at its first attempt (${restart_ms[*]} ms)" test "$restart_ok" = 1
		check_eq "$kind: all three agents registered at the end" "$R1 $R2 $R3" "$(registered)"
		check "$kind: nobody declared down" bash -c "! grep -q 'declared down' '$LOG'"
		check "$kind: no host lost" bash -c "! grep -q 'host lost' '$LOG'"
		;;
	agent-stop)
		lost_line=$(grep -m1 "agent silent for .* host lost" "$LOG" || true)
		say "router: ${lost_line:-<no host-lost line>}"
		check "agent-stop: r2's host declared lost with its reason" grep -q "$R2.*agent silent for .* host lost\|agent silent for .* host lost.*$R2" <<<"$lost_line"
		if [[ -n $lost_line ]]; then
			lost_after=$(($(log_ms "$lost_line") - t_stop))
			say "agent-stop: stop → host lost: $lost_after ms (dead_after $DEAD_AFTER_MS)"
			check "agent-stop: declared lost within dead_after + 400 ms ($lost_after ms)" test "$lost_after" -le $((DEAD_AFTER_MS + 400))
		fi
		check_eq "agent-stop: one host-lost line, for r2 only" 1 "$(grep -c 'host lost' "$LOG" || true)"
		down_lines=$(grep 'declared down' "$LOG" || true)
		say "router: ${down_lines:-<no declared-down line>}"
		check "agent-stop: r2 declared down (host lost), nobody else" \
			bash -c "[[ \$(grep -c 'declared down' '$LOG') == 1 ]] && grep 'declared down' '$LOG' | grep -q 'replica $R2 declared down'"
		reg_again() { grep "agent registered" "$LOG" | grep "$R2" | tail -1 | grep -q . && (($(log_ms "$(grep "agent registered" "$LOG" | grep "$R2" | tail -1)") > t_cont)); }
		check "agent-stop: r2's agent registered again within 3 s of SIGCONT" wait_for 3 reg_again
		if reg_again; then say "agent-stop: SIGCONT → registered: $(($(log_ms "$(grep "agent registered" "$LOG" | grep "$R2" | tail -1)") - t_cont)) ms"; fi
		back_line=$(grep -m1 "replica $R2 answers again" "$LOG" || true)
		say "router: ${back_line:-<no line taking r2 back>}"
		[[ -n $back_line ]] && say "agent-stop: stop → r2 back in service: $(($(log_ms "$back_line") - t_stop)) ms (the agent continued at $((t_cont - t_stop)) ms)"
		check "agent-stop: r2 taken back into the service (its server answers the probe)" wait_for 3 grep -q "replica $R2 answers again" "$LOG"
		check_eq "agent-stop: all three agents registered at the end" "$R1 $R2 $R3" "$(registered)"
		;;
	esac
done

# A fresh connection is served by all three replicas (r2 serves again).
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
check_eq "a fresh connection afterwards echoed ($(cat "$T/fresh.json"))" 0 "$rc"
check "the fresh connection is served by all three replicas (connections per replica: $conns)" \
	python3 -c "import sys; c=[int(x) for x in '$conns'.split()]; sys.exit(0 if len(c) == 3 and min(c) >= 1 else 1)"

check "the router still runs" kill -0 "$pid"
check "no panic" bash -c "! grep -qi 'panicked' '$LOG'"
say "router RSS: $((rss0 / 1024)) MiB before, peak $((rss_peak_all / 1024)) MiB; threads: $threads0 before, peak $threads_peak_all"
check "router RSS peak under 256 MiB ($((rss_peak_all / 1024)) MiB)" test "$rss_peak_all" -lt $((256 * 1024))
check "router threads at most 256 sessions + 16 over the start ($threads_peak_all, $threads0 at the start)" test "$threads_peak_all" -le $((threads0 + 256 + 16))
check "no log line over 2,000 bytes (longest: $(wc -L <"$LOG"))" test "$(wc -L <"$LOG")" -le 2000
[[ -n ${FTNET_E2E_FIGURES:-} ]] && flock "$FTNET_E2E_FIGURES" cat "$T/figures.txt" >>"$FTNET_E2E_FIGURES"
e2e_finish
