#!/usr/bin/env bash
# Backpressure through the determinism layer: Redis × N under the shim (lab --shim), no fault,
# 32 concurrent connections of order-sensitive commands on shared keys: 16 from
# tests/e2e/orderload.py (two processes of 8: APPEND, LPUSH/RPOP, SETRANGE, HINCRBY, ZINCRBY,
# MULTI/EXEC, EVAL, single or in pipelines of 20, for SECS seconds) and 16 from redis-benchmark
# (APPEND to 8 shared keys, one segment per command, BENCH_N commands), while two bounded busy loops load the CPU the router shares.
#
#   client ns ── router ns (ftnet router + 2 busy loops) ── r1..rN ns (agent → shim → redis)
#
# A busy server is a normal server: the router → agent → shim path buffers and waits, it never
# drops a record, so no shim falls back to the kernel's order and nobody is evicted.
# Pass: 0 client errors (every reply parsed and of the command's type: a spliced reply fails),
# every replica's DEBUG DIGEST equal and not empty, no replica declared down or evicted, no shim
# dropped by its agent and none that lost the order (server.log, agent.log, router.log).
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init redis-load "$@"
[[ $FAULT == none ]] || die "redis-load runs without a fault (redis-orderlost has one)"

REDIS_PORT=6379
SECS=$(quick 10 20)
BENCH_N=$(quick 100000 200000)
lab_up --port "$REDIS_PORT" --shim

# The router host's CPU, loaded for the whole run (bounded: timeout).
busy=()
for i in 1 2; do
	timeout $((SECS + 5)) "$FTNET" lab exec --name "$LAB" router -- timeout $((SECS + 2)) sh -c 'while :; do :; done' &
	busy+=($!)
done
t0=$(now_ms)
clients=()
for i in 1 2; do
	timeout $((SECS + 90)) "$FTNET" lab exec --name "$LAB" client -- \
		python3 "$E2E_DIR/orderload.py" --host "$VIP" --port "$REDIS_PORT" --conns 8 --seconds "$SECS" --seed "$((SEED * 10 + i))" \
		>"$T/load$i.json" 2>"$T/load$i.err" &
	clients+=($!)
done
# 16 more connections from a C client: one segment per command, so many small input events.
timeout $((SECS + 90)) "$FTNET" lab exec --name "$LAB" client -- \
	redis-benchmark -h "$VIP" -p "$REDIS_PORT" -c 16 -n "$BENCH_N" -r 8 -q APPEND 'b:__rand_int__' 'v:__rand_int__;' \
	>"$T/bench.out" 2>&1 &
bench=$!
rcs=()
for p in "${clients[@]}"; do
	rc=0
	wait "$p" || rc=$?
	rcs+=("$rc")
done
brc=0
wait "$bench" || brc=$?
for p in "${busy[@]}"; do wait "$p" 2>/dev/null || true; done
say "load done in $(($(now_ms) - t0)) ms"
say "redis-benchmark APPEND -c 16: exit $brc, $(tr "\r" "\n" <"$T/bench.out" | grep -o "[0-9.]* requests per second" | tail -1)"
check_eq "redis-benchmark exit status" 0 "$brc"
check "no error in redis-benchmark's output" no_errors "$T/bench.out"
for i in 1 2; do
	say "client $i: $(head -c 2000 "$T/load$i.json") $(head -c 500 "$T/load$i.err")"
	check_eq "client $i exit status" 0 "${rcs[$((i - 1))]}"
	check_eq "client $i errors" 0 "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["errors"])' "$T/load$i.json" 2>/dev/null || echo unreadable)"
done
all=$(seq 1 "$N")
# shellcheck disable=SC2086
settle $all
# shellcheck disable=SC2086
same_digests "after the load" $all
d=/run/ftnet/lab/$LAB
check "router log: no replica declared down" bash -c "! grep -E 'declared down|ORDER LOST' '$d/router.log'"
# The service does not vote; the router compares the replies' later copies all the same: under
# the shim every replica answers every command alike (redis-order's control shows the check finds
# differences without it).
check "router log: no reply differs between replicas" bash -c "! grep -q 'reply differs' '$d/router.log'"
check "router log: no replica evicted from a connection" bash -c "! grep -E 'evicted \\(' '$d/router.log'"
for r in $all; do
	check "r$r: the shim orders its input" grep -q "input follows the router's order" "$(replica_dir "$r")/server.log"
	check "r$r: the shim never lost the order or fell back" bash -c "! grep -Eq 'replicas may diverge|ORDER LOST' '$(replica_dir "$r")/server.log'"
	check "r$r: the agent never dropped its shim" bash -c "! grep -q 'shim dropped' '$(replica_dir "$r")/agent.log'"
done
timeout 20 "$FTNET" lab status --name "$LAB" >"$T/status.txt" 2>&1 || true
check "status: no replica down" bash -c "! grep -Eq '^ +198\.18\.[0-9.]+ +down' '$T/status.txt'"
check "status: no record dropped" bash -c "! grep -Eq 'dropped_records\"?:? *[1-9]' '$T/status.txt'"
e2e_finish
