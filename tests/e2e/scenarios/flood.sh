#!/usr/bin/env bash
# Floods against a running router while a legitimate client is measured. socat echo × 3. For
# each kind (flood.py: syn, garbage, icmp, rst and ack at the legitimate connection) the client
# namespace sends FTNET_E2E_FLOOD_PPS packets/s (5,000) for FTNET_E2E_FLOOD_SECONDS (4 s) while
# the legitimate client echoes 64 bytes every 5 ms on one connection and opens a fresh
# connection every 100 ms; the router's RSS is sampled every 100 ms.
# Pass, per kind: the flood ran (at least half its rate was sent); the legitimate connection's
# every echo came back exact and no fresh connection failed; its round trip p99 stays under
# 200 ms (a 2-core machine runs the flood's sender, the router, three servers and the client:
# a descheduled process alone shows as tens of ms; idle it is < 1 ms); after all floods the
# router still runs, nobody was declared down, its RSS peak stayed under 256 MiB. Figures per
# kind: rate held, round trip p50/p99/max, RSS peak, what the router counted (drops by reason,
# challenge ACKs).
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init flood "$@"
[[ $FAULT == none ]] || die "flood runs without a fault"
PPS=${FTNET_E2E_FLOOD_PPS:-5000}
SECS=${FTNET_E2E_FLOOD_SECONDS:-4}
P99_BAR=${FTNET_E2E_FLOOD_P99_MS:-200}

PORT=7000
lab_up --port "$PORT" --server "socat -t 60 TCP-LISTEN:{port},fork,reuseaddr EXEC:cat"
LOG=/run/ftnet/lab/$LAB/router.log
status_json() { lab status --name "$LAB" --json 2>/dev/null; }
pid=$(status_json | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
say "router pid $pid"
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0; }
rss0=$(rss_kb)
counted() { # the router's drops and challenge ACKs, as one JSON object
	status_json | python3 -c 'import json,sys; s=json.load(sys.stdin)["status"]; c=s["counters"]; d={k:v for k,v in s["drops"]}; d.update({k:c[k] for k in ("challenge_acks","challenge_acks_limited","packets_in")}); print(json.dumps(d))'
}

: >"$T/figures.txt"
peak_all=$rss0
for kind in syn garbage icmp rst ack; do
	counted >"$T/before-$kind.json"
	(
		peak=0
		while [[ ! -e $T/stop-$kind ]]; do
			r=$(rss_kb)
			((r > peak)) && peak=$r
			echo "$peak" >"$T/peak-$kind"
			sleep 0.1
		done
	) &
	sampler=$!
	rc=0
	timeout $((SECS * 3 + 30)) "$FTNET" lab exec --name "$LAB" client -- \
		python3 "$E2E_DIR/flood.py" --vip "$VIP" --port "$PORT" --kind "$kind" --pps "$PPS" --seconds "$SECS" \
		>"$T/flood-$kind.json" 2>"$T/flood-$kind.err" || rc=$?
	touch "$T/stop-$kind"
	wait "$sampler" || true
	counted >"$T/after-$kind.json"
	peak=$(cat "$T/peak-$kind" 2>/dev/null || echo 0)
	((peak > peak_all)) && peak_all=$peak
	[[ -s $T/flood-$kind.err ]] && say "$kind stderr: $(head -c 1500 "$T/flood-$kind.err")"
	fig=$(python3 - "$T/flood-$kind.json" "$T/before-$kind.json" "$T/after-$kind.json" "$peak" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
b, a = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
delta = {k: a[k] - b.get(k, 0) for k in a if a[k] - b.get(k, 0) > 0 and k != "packets_in"}
print(f"{r['kind']}: {r['sent']} packets at {r['pps']}/s (target {r['target_pps']}), router took "
      f"{a['packets_in'] - b['packets_in']} packets; legitimate echo round trip p50 {r['rtt_p50_ms']} "
      f"p99 {r['rtt_p99_ms']} max {r['rtt_max_ms']} ms over {r['rtt_n']} echoes, {len(r['errors'])} errors; "
      f"fresh connections {r['fresh_ok']} ok {r['fresh_failed']} failed; router RSS peak "
      f"{int(sys.argv[4]) // 1024} MiB; counted: {json.dumps(delta)}")
PY
	) || fig="$kind: no result ($(head -c 300 "$T/flood-$kind.json"))"
	say "FIGURE flood $fig"
	echo "$fig" >>"$T/figures.txt"
	check "$kind: the legitimate client was served throughout (echoes exact, fresh connections answered)" test "$rc" = 0
	check "$kind: the flood ran (at least half of $PPS/s sent)" python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r['pps'] >= $PPS // 2 else 1)" "$T/flood-$kind.json"
	check "$kind: echo round trip p99 under $P99_BAR ms" python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r['rtt_p99_ms'] is not None and r['rtt_p99_ms'] < $P99_BAR else 1)" "$T/flood-$kind.json"
done
check "the router still runs" kill -0 "$pid"
check "nobody declared down" bash -c "! grep -q 'declared down' '$LOG'"
check "no panic" bash -c "! grep -qi 'panicked' '$LOG'"
say "router RSS: $((rss0 / 1024)) MiB before, peak $((peak_all / 1024)) MiB"
check "router RSS peak under 256 MiB ($((peak_all / 1024)) MiB)" test "$peak_all" -lt $((256 * 1024))
[[ -n ${FTNET_E2E_FIGURES:-} ]] && flock "$FTNET_E2E_FIGURES" cat "$T/figures.txt" >>"$FTNET_E2E_FIGURES"
e2e_finish
