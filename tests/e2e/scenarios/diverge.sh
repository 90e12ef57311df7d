#!/usr/bin/env bash
# A misconfigured service is reported on its first divergent reply (issue: divergence is always
# detected, even without voting). Redis × 3 WITHOUT the shim, default output policy (`primary`, no
# vote): redis-benchmark -c 50 INCR on one key (rounds of it, at most 5, until a replica is out). Each Redis applies the concurrent INCRs in the
# order its kernel delivers them, so the replicas' counters, and their replies, differ.
# Pass: the router logged a follower's reply differing from what the client got, with the
# connection and the stream offset; the divergences counter moved; a replica that a majority
# contradicted was taken out of the service (marked down, logged); the clients got well-formed
# replies (redis-benchmark exits 0; the followed replica's stream is never spliced).
# The same load under the shim (redis-order, redis-load) logs no divergence: that is the control.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init diverge "$@"
[[ $N == 3 && $FAULT == none ]] || die "diverge runs with three replicas and no fault"

REDIS_PORT=6379
REQS=$(quick 20000 40000)
lab_up --port "$REDIS_PORT"
LOG=/run/ftnet/lab/$LAB/router.log
down_count() { lab status --name "$LAB" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(1 for r in d["status"]["services"][0]["replicas"] if not r["alive"]))'; }
# A replica leaves the service only once a majority agrees against it at a compared point (two
# replicas' counters equal, the third's not); each replica's order is its kernel's, so when that
# happens is chance: up to ROUNDS rounds of the load, until one is out.
ROUNDS=5
for ((round = 1; round <= ROUNDS; round++)); do
	rc=0
	timeout 300 "$FTNET" lab exec --name "$LAB" client -- \
		redis-benchmark -h "$VIP" -p "$REDIS_PORT" -c 50 -n "$REQS" -t incr -q >"$T/bench.out" 2>&1 || rc=$?
	tr '\r' '\n' <"$T/bench.out" | grep -v 'rps=' | grep -v '^ *$' | sed "s/^/    round $round: /" || true
	check_eq "round $round: redis-benchmark exit status" 0 "$rc"
	sleep 0.3
	(($(down_count) >= 1)) && break
done
say "rounds of load: $((round > ROUNDS ? ROUNDS : round))"
for r in 1 2 3; do say "r$r counter: $(redis_at "$r" GET 'counter:__rand_int__' | tr -d '\r')"; done
line=$(grep -m1 "reply differs from what the client got" "$LOG" || true)
say "router: ${line:-<no divergence logged>}"
check "the divergence was logged with the connection and the stream offset" \
	grep -Eq "connection [0-9.:]+->[0-9.:]+: replica [0-9.]+'s reply differs from what the client got from replica [0-9.]+ in the bytes before reply byte [0-9]+" "$LOG"
divergences=$(lab status --name "$LAB" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["counters"]["divergences"])')
say "divergences counted: $divergences"
check "divergences counted" test "$divergences" -gt 0
check "a replica a majority contradicted left the service" grep -q "it leaves the service" "$LOG"
down=$(down_count)
say "replicas out of service: $down"
check "at least one replica marked down" test "$down" -ge 1
e2e_finish
