#!/usr/bin/env bash
# (d) 2,000 short connections in a row (redis-cli PING, one connection each) through the VIP,
# with the fault injected after a random connection. Pass: every one of them answered PONG.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init shortconn "$@"

REDIS_PORT=6379
COUNT=$(quick 500 2000)
out=$T/pings.txt
: >"$out"

lab_up --port "$REDIS_PORT"

progress() { wc -l <"$out"; }
fault_when $((COUNT * $(random_pct 10 60) / 100)) "$COUNT" progress connections

t0=$(now_ms)
rc=0
# One shell in the client namespace runs the whole loop; each PING is bounded by its own timeout.
timeout 900 "$FTNET" lab exec --name "$LAB" client -- bash -c '
	for ((i = 1; i <= $1; i++)); do
		r=$(timeout 15 redis-cli -h "$2" -p "$3" PING 2>&1) || r="$r (exit $?)"
		printf "%d %s\n" "$i" "$(printf %s "$r" | tr "\n" " ")"
	done' loop "$COUNT" "$VIP" "$REDIS_PORT" >>"$out" 2>&1 || rc=$?
dt=$(($(now_ms) - t0))
fault_done
ok=$(grep -Ec '^[0-9]+ PONG$' "$out" || true)
say "$COUNT connections took $dt ms ($((dt * 1000 / COUNT)) µs each)"
if ((ok != COUNT)); then
	say "failed connections (first 20):"
	grep -Ev '^[0-9]+ PONG$' "$out" | head -20 | sed 's/^/    /'
fi
check_eq "client loop exit status" 0 "$rc"
check_eq "connections answered PONG" "$COUNT" "$ok"
e2e_finish
