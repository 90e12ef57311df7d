#!/usr/bin/env bash
# (i) Deterministic input order (sequencer + shim): Redis × N under `redis-benchmark -c 50`.
# Every replica runs under `ftnet run` (lab --shim), so each sees the clients' commands in the
# router's order. The router drops every DROP-th data packet to the last replica (its test hook;
# there is no netem here), so that replica gets the clients' segments in another order than the
# others, as on a real network with loss (failure detection at 3 s, so the resulting stalls evict
# nobody). The last one, not r1 or r2: the clients follow the first live replica's replies (output
# policy `primary`), and after a kill of r1 a lossy r2 would cost the clients a retransmission
# timeout per dropped segment (the run takes three times as long; see README).
# Two loads per run: the issue's mix (-t set,incr,lpush,sadd,hset -r 10000: its
# final state happens not to depend on the order, but its INCR/LPUSH replies do) and APPEND of
# random values to 100 keys (final state depends on the order).
# Pass, for each of RUNS runs: redis-benchmark exit 0 with no error, every live replica's
# DEBUG DIGEST equal and not empty. With FAULT=kill a replica is killed during the first run:
# 0 client errors and the survivors identical.
# FAULT=none also runs the control: the same APPEND load on a lab *without* the shim, where the
# replicas' digests must differ — the shim is what keeps them equal.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init redis-order "$@"
[[ $FAULT != cut ]] || die "redis-order runs with none or kill"

REDIS_PORT=6379
RUNS=$(quick 2 5)
N_MIX=${FTNET_E2E_ORDER_N:-$(quick 5000 10000)}      # per test of the mix (5 tests)
N_APPEND=$(quick 5000 10000)
DROP=$(quick 50 100)
lab_up --port "$REDIS_PORT" --shim --fault-drop "$N:$DROP" --failure-ms 3000

watch=${SURVIVORS[0]}
progress() { commands_of "$watch"; }
for ((run = 1; run <= RUNS; run++)); do
	if ((run == 1)); then fault_when $((5 * N_MIX * $(random_pct 20 60) / 100)) $((5 * N_MIX)) progress commands; fi
	t0=$(now_ms)
	rc=0
	redis_bench "$T/mix$run.out" -r 10000 -n "$N_MIX" -t set,incr,lpush,sadd,hset -q || rc=$?
	((run == 1)) && fault_done
	rc2=0
	redis_bench "$T/append$run.out" -r 100 -n "$N_APPEND" -q APPEND 'log:__rand_int__' 'v:__rand_int__' || rc2=$?
	say "run $run: $(rps "$T/mix$run.out")| APPEND $(rps "$T/append$run.out")($(($(now_ms) - t0)) ms)"
	check_eq "run $run: redis-benchmark (mix) exit status" 0 "$rc"
	check_eq "run $run: redis-benchmark (APPEND) exit status" 0 "$rc2"
	check "run $run: no error in the mix's output" no_errors "$T/mix$run.out"
	check "run $run: no error in the APPEND output" no_errors "$T/append$run.out"
	live=("${SURVIVORS[@]}")

	settle "${live[@]}"
	same_digests "run $run" "${live[@]}"
done
for r in "${live[@]}"; do
	check "r$r server log shows the shim ordering its input" grep -q "input follows the router's order" "$(replica_dir "$r")/server.log"
	check "r$r shim never fell back to the kernel's order" bash -c "! grep -q 'replicas may diverge' '$(replica_dir "$r")/server.log'"
done
if [[ $FAULT == none ]]; then
	# The control: the same APPEND load and loss without the shim.
	timeout 120 "$FTNET" lab down --name "$LAB" >/dev/null 2>&1
	lab_up --port "$REDIS_PORT" --fault-drop "$N:$DROP" --failure-ms 3000
	rc=0
	redis_bench "$T/control.out" -r 100 -n "$N_APPEND" -q APPEND 'log:__rand_int__' 'v:__rand_int__' || rc=$?
	settle $(seq 1 "$N")
	ds=()
	for ((r = 1; r <= N; r++)); do ds+=("$(digest_of "$r")"); done
	distinct=$(printf '%s\n' "${ds[@]}" | sort -u | wc -l)
	errs=$(tr '\r' '\n' <"$T/control.out" | grep -Eic 'error' || true)
	say "control without the shim: exit $rc, $errs error line(s), digests ${ds[*]}"
	check "without the shim the replicas diverge (distinct digests: $distinct) or the client gets spliced replies (errors: $errs)" \
		test "$distinct" -gt 1 -o "$errs" -gt 0
	# The service does not vote, yet the router compares the later copies of each reply: APPEND
	# answers the value's new length, which differs where the replicas applied the appends in
	# other orders. Found, logged with the connection and the offset, counted.
	log=/run/ftnet/lab/$LAB/router.log
	line=$(grep -m1 "reply differs" "$log" || true)
	say "router: ${line:-<no line>}"
	check "without the shim the router reports replies that differ (vote = off)" test -n "$line"
	ndiv=$(timeout 10 "$FTNET" lab status --name "$LAB" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["counters"]["divergences"])')
	say "divergences counted: $ndiv"
	check "the divergences are counted" test "$ndiv" -gt 0
fi
e2e_finish
