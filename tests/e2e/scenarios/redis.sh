#!/usr/bin/env bash
# (c) Redis: redis-benchmark -c 1 -t set,get,incr,lpush through the VIP, then replica equality.
# (redis-conc.sh: the same with 50 concurrent connections.)
# Pass: benchmark exit 0 with no error in its output, the INCR counter and the list length equal
# the request count exactly (nothing lost, nothing applied twice) through the VIP and on every
# survivor, and every survivor's DEBUG DIGEST is equal and not the empty-database digest.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init "${E2E_REDIS_NAME:-redis}" "$@"

REDIS_PORT=6379
CLIENTS=${E2E_REDIS_CLIENTS:-1}   # redis-conc.sh runs this with 50
REQS=$(quick 20000 100000)
TOTAL=$((4 * REQS))

lab_up --port "$REDIS_PORT"   # the lab's default server is redis-server with DEBUG enabled

watch=${SURVIVORS[0]}
progress() { # commands the first survivor has processed so far
	redis_at "$watch" INFO stats | tr -d '\r' | awk -F: '$1 == "total_commands_processed" { print $2 }'
}
fault_when $((TOTAL * $(random_pct 10 60) / 100)) "$TOTAL" progress commands

t0=$(now_ms)
rc=0
timeout 600 "$FTNET" lab exec --name "$LAB" client -- \
	redis-benchmark -h "$VIP" -p "$REDIS_PORT" -c "$CLIENTS" -n "$REQS" -t set,get,incr,lpush -q \
	>"$T/bench.out" 2>&1 || rc=$?
dt=$(($(now_ms) - t0))
fault_done
tr '\r' '\n' <"$T/bench.out" | grep -v 'rps=' | grep -v '^ *$' | sed 's/^/    /' || true
say "benchmark took $dt ms"
check_eq "redis-benchmark exit status" 0 "$rc"
check "no error in redis-benchmark output" \
	bash -c "! grep -Eiq 'error|reset|refused|timed out|timeout|closed|broken' '$T/bench.out'"
check_eq "completed tests" 4 "$(tr '\r' '\n' <"$T/bench.out" | grep -c 'requests per second' || true)"

vip() { timeout 20 "$FTNET" lab exec --name "$LAB" client -- redis-cli -h "$VIP" -p "$REDIS_PORT" "$@"; }
check_eq "INCR counter through the VIP" "$REQS" "$(vip GET 'counter:__rand_int__')"
check_eq "LPUSH list length through the VIP" "$REQS" "$(vip LLEN mylist)"

digest_of() { redis_at "$1" DEBUG DIGEST | tr -d '\r'; }
first_digest=
for r in "${SURVIVORS[@]}"; do
	# A slower replica may still be applying the last commands; give it a moment.
	wait_for 10 test "$(redis_at "$r" GET 'counter:__rand_int__')" = "$REQS" || true
	check_eq "r$r INCR counter" "$REQS" "$(redis_at "$r" GET 'counter:__rand_int__')"
	check_eq "r$r list length" "$REQS" "$(redis_at "$r" LLEN mylist)"
	d=$(digest_of "$r")
	say "r$r DEBUG DIGEST $d"
	check "r$r digest is not the empty-database digest" test "$d" != "$EMPTY_DIGEST" -a -n "$d"
	if [[ -z $first_digest ]]; then
		first_digest=$d
	else
		check_eq "r$r digest equals r${SURVIVORS[0]}'s" "$first_digest" "$d"
	fi
done
e2e_finish
