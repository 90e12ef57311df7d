#!/usr/bin/env bash
# A stateless group heals by itself: a replica whose server crashed and was restarted (kill), or
# whose host was cut off and came back (cut), serves again with no operator action.
#
#  client ──veth── router (ftnet, service `stateless = true`) ──veth── r1, r2, r3 (socat echo)
#  (stallmeter, connstorm)                                            the victim: its server killed
#                                                                     and started again, or its link
#                                                                     cut and restored
#
# heal-nginx: the same with nginx serving static files (no state, so no checkpoint: joining means
# taking new connections again; an open connection is never joined by a stateless replica, it
# finishes on the others): one slow GET of a 20 MiB file (~20 s) and a storm of short GETs of a
# 64 KiB one, every body checked.
#
# An echo stream (stallmeter.py) and a storm of short connections (connstorm.py) run for ~12 s.
# ~2 s in, the victim's server is killed (kill -9) or its link cut: the router takes it out of
# its connections and the service. ~2 s later the server is started again (`ftnet lab restart`)
# or the link restored (`ftnet lab heal`: the host comes back with its server). The router
# probes a down replica of a stateless service (a SYN to its port every 0.5 s); the restarted
# server answers and the replica serves again. Pass: stream intact, every short connection
# answered; the router logs the replica down, then back after the restart (one line each);
# status shows it alive and in new connections. Figure: restart → back in service.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
NAME=${FTNET_E2E_HEAL_NAME:-heal}
e2e_init "$NAME" "$@"
[[ $FAULT == kill || $FAULT == cut ]] || die "heal runs with a server kill or a link cut"

if [[ $NAME == heal-nginx ]]; then
	PORT=8080
	big=$(e2e_data rand-20m 20)
	head -c 65536 "$big" >"$T/small.bin"
	lab_up --port "$PORT" --server "$(nginx_server_cmd "$big")" --stateless
else
	PORT=7000
	lab_up --port "$PORT" --server "socat -t 60 TCP-LISTEN:{port},fork,reuseaddr EXEC:cat" --stateless
fi
LOG=/run/ftnet/lab/$LAB/router.log
VADDR=$(replica_ip "$VICTIM")
state_of() { # state_of ADDR → "alive connections"
	lab status --name "$LAB" --json | python3 -c "import json,sys; d=json.load(sys.stdin); r=[r for r in d['status']['services'][0]['replicas'] if r['addr'] == sys.argv[1]][0]; print(f\"{r['alive']} {r['connections']}\")" "$1"
}

DURATION=12
http=()
if [[ $NAME == heal-nginx ]]; then
	# The long-lived connection: a 20 MiB file read at 1 MB/s (~20 s: more than the client's
	# receive buffer holds, so the transfer runs through the kill), checked byte for byte.
	timeout 120 "$FTNET" lab exec --name "$LAB" client -- \
		curl -sS --max-time 100 --limit-rate 1M -o "$T/long.bin" -w '%{http_code}' "http://$VIP:$PORT/big.bin" \
		>"$T/stream.json" 2>"$T/stream.err" &
	http=(--http /small.bin --expect "$T/small.bin")
else
	timeout 120 "$FTNET" lab exec --name "$LAB" client -- \
		python3 "$E2E_DIR/stallmeter.py" --host "$VIP" --port "$PORT" --chunk 1024 --interval-ms 2 \
		--duration "$DURATION" --warmup 0.5 >"$T/stream.json" 2>"$T/stream.err" &
fi
meter=$!
timeout 120 "$FTNET" lab exec --name "$LAB" client -- \
	python3 "$E2E_DIR/connstorm.py" --host "$VIP" --port "$PORT" --duration "$DURATION" --inflight 4 \
	--timeout 20 --max 20000 "${http[@]}" >"$T/storm.json" 2>"$T/storm.err" &
storm=$!

sleep 2
check "lab $FAULT r$VICTIM" lab "$FAULT" --name "$LAB" "$VICTIM"
down_line() { grep -m1 "replica $VADDR declared down" "$LOG"; }
check "router declared r$VICTIM down" wait_for 5 down_line
sleep 2
t_restart=$(now_ms)
if [[ $FAULT == kill ]]; then
	check "lab restart r$VICTIM" lab restart --name "$LAB" "$VICTIM"
else
	check "lab heal r$VICTIM" lab heal --name "$LAB" "$VICTIM"
fi
back_line() { grep -m1 "replica $VADDR answers again" "$LOG"; }
check "router took r$VICTIM back by itself" wait_for 5 back_line
line=$(back_line || true)
say "router: ${line:-<no line>}"
if [[ -n $line ]]; then
	back_ms=$(python3 -c 'import sys,datetime; ts=sys.argv[1].split()[0]; print(int(datetime.datetime.fromisoformat(ts.replace("Z","+00:00")).timestamp()*1000))' "$line")
	say "restart/heal → back in service: $((back_ms - t_restart)) ms (probe every 500 ms)"
	echo "heal-$FAULT back_to_serving_ms=$((back_ms - t_restart))" >"$T/figure.txt"
fi
busy() { local s; s=$(state_of "$VADDR"); [[ $s == True* && ${s##* } -gt 0 ]]; }
check "r$VICTIM alive and in new connections" wait_for 4 busy
say "r$VICTIM: $(state_of "$VADDR")"

rc=0
wait "$meter" || rc=$?
say "stream: $(cat "$T/stream.json")"
[[ -s $T/stream.err ]] && say "stream stderr: $(head -c 1000 "$T/stream.err")"
check_eq "long-lived stream intact through the fault and the rejoin" 0 "$rc"
if [[ $NAME == heal-nginx ]]; then
	check_eq "long-lived GET: HTTP status" 200 "$(cat "$T/stream.json")"
	check_eq "long-lived GET: sha256" "$(sha "$big")" "$(sha "$T/long.bin")"
fi
rc=0
wait "$storm" || rc=$?
say "connstorm: $(cat "$T/storm.json")"
check_eq "connstorm exit status" 0 "$rc"
failed=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['failed'])" "$T/storm.json" 2>/dev/null || echo "?")
check_eq "short connections that failed" 0 "$failed"
check_eq "r$VICTIM back once" 1 "$(grep -c "replica $VADDR answers again" "$LOG")"
e2e_finish
