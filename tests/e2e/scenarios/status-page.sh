#!/usr/bin/env bash
# The live status page in a real headless browser (Debian's chromium, driven over the DevTools
# protocol by statuspage.py). socat echo × 3; an echo stream (stallmeter.py) and a storm of short
# connections through the VIP keep the router busy. The browser, in the router's namespace, loads
# http://127.0.0.1:9100/ (the lab's metrics_listen); once every replica shows serving, the
# victim's server is killed with kill -9.
# Pass: the page loads and shows the three replicas serving; it shows the victim out of service
# within 1 s of the kill (the page polls every 250 ms; the router refreshes its snapshot at once
# when a replica goes down, else every 250 ms); its timeline names the victim; every request the page made went to the router; no script
# error; /metrics then shows the victim not up, the detection delay and the stream's stall after
# the eviction observed, bytes per service; the stream intact. Figures: load time, kill → shown
# down. Screenshots and the metrics sample in the artifacts.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init status-page "$@"
[[ $FAULT == kill ]] || die "status-page runs with a server kill"
command -v chromium >/dev/null || die "chromium is not installed (scripts/deps.sh installs it)"

PORT=7000
lab_up --port "$PORT" --server "socat -t 60 TCP-LISTEN:{port},fork,reuseaddr EXEC:cat"
VADDR=$(replica_ip "$VICTIM")

DURATION=14
timeout 120 "$FTNET" lab exec --name "$LAB" client -- \
	python3 "$E2E_DIR/stallmeter.py" --host "$VIP" --port "$PORT" --chunk 1024 --interval-ms 2 \
	--duration "$DURATION" --warmup 0.5 >"$T/stream.json" 2>"$T/stream.err" &
meter=$!
timeout 120 "$FTNET" lab exec --name "$LAB" client -- \
	python3 "$E2E_DIR/connstorm.py" --host "$VIP" --port "$PORT" --duration "$DURATION" \
	>"$T/storm.json" 2>"$T/storm.err" &
storm=$!

mkdir -p "$T/page"
rc=0
# Debian's python3 (its python3-websocket), whatever python3 comes first on PATH.
timeout 90 ip netns exec "ftnet-$LAB-router" /usr/bin/python3 "$E2E_DIR/statuspage.py" \
	--url http://127.0.0.1:9100/ --victim "$VADDR" --replicas "$N" --out "$T/page" --within 1.0 \
	-- "$FTNET" lab kill --name "$LAB" "$VICTIM" >"$T/page.json" 2>"$T/page.err" || rc=$?
say "browser: $(cat "$T/page.json") $(tail -3 "$T/page.err")"
# The screenshots are kept whatever the result (a page is checked by eye too).
shots=${FTNET_E2E_ARTIFACTS:-/tmp/ftnet-e2e-artifacts}/status-page-screenshots
mkdir -p "$shots" && cp "$T"/page/*.png "$shots/" 2>/dev/null && say "screenshots: $shots"
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); v=d.get(sys.argv[2]); print(json.dumps(v) if not isinstance(v,(str,int,float)) or isinstance(v,bool) else v)" "$T/page.json" "$1"; }
check "the page loaded and showed $N replicas serving" test "$(field loaded_ms)" != null
check "the kill ran" test "$(field kill_rc)" = 0
down_ms=$(field shown_down_ms)
say "FIGURE status page: loaded in $(field loaded_ms) ms; r$VICTIM killed -> shown $(field victim_state) after $down_ms ms"
check "the page showed r$VICTIM out of service within 1 s of the kill ($down_ms ms)" \
	bash -c "[[ '$down_ms' != null ]] && (( $down_ms <= 1000 ))"
check "its timeline names r$VICTIM" grep -q "$VADDR" <<<"$(field timeline)"
check "every request went to the router ($(field requests) requests: $(field paths))" test "$(field foreign)" = "[]"
check "no script error" test "$(field errors)" = "[]"
check "the browser run passed" test "$rc" = 0

# /metrics on the same listener after the kill: the histograms and counters a failover feeds.
metrics() { ip netns exec "ftnet-$LAB-router" curl -sS --max-time 5 "http://127.0.0.1:9100/$1"; }
metrics metrics >"$T/metrics.txt" 2>&1 || true
cp "$T/metrics.txt" "$shots/metrics-after-kill.txt" 2>/dev/null || true
check "metrics: r$VICTIM not up" grep -q "^ftnet_replica_up{service=\"lab\",replica=\"$VADDR\"} 0$" "$T/metrics.txt"
check "metrics: the failure's detection delay observed once" grep -q "^ftnet_failure_detection_milliseconds_count 1$" "$T/metrics.txt"
check "metrics: the stream's stall after the eviction observed" grep -Eq "^ftnet_stall_after_eviction_milliseconds_count [1-9]" "$T/metrics.txt"
check "metrics: bytes per service counted" grep -Eq "^ftnet_service_client_bytes_out_total\{service=\"lab\"\} [1-9]" "$T/metrics.txt"
say "metrics after the kill: $(grep -E '^ftnet_(failure_detection|stall_after_eviction)_milliseconds_(count|sum)' "$T/metrics.txt" | tr '\n' ' ')"
wait "$meter" || true
wait "$storm" || true
check "echo stream intact" python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d.get('ok') else 1)" "$T/stream.json"
failed=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['failed'])" "$T/storm.json" 2>/dev/null || echo "?")
check_eq "short connections that failed" 0 "$failed"
e2e_finish
