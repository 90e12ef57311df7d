#!/usr/bin/env bash
# Deterministic input order for an asyncio service on each readiness call the shim orders:
# tests/e2e/respserver.py (a Redis-protocol server on one asyncio loop) × N under `ftnet run`,
# its selector from FTNET_E2E_SELECTOR (poll, select or epoll; the wrappers asyncio-<selector>.sh
# set it). asyncio registers an accepted socket a few loop iterations after accepting it and
# polls without waiting in between; poll and select loops handle what one call reported in an
# order of their own. The load is redis-benchmark -c 50 (APPEND of random values to 100 keys and
# INCR/LPUSH/SET: replies and final state depend on the order across connections) with loss on
# the last replica's link (the router's test hook), so it gets the clients' segments in another order
# (the last one: the clients follow the first live replica's replies, see redis-order.sh).
# Pass, for each of RUNS runs: redis-benchmark exit 0 with no error, every live replica's
# DEBUG DIGEST equal and not empty. FAULT=kill: a replica killed during the first run, 0 client
# errors, survivors identical. FAULT=none also runs the control: the same load without the
# shim, where the replicas diverge — the shim is what keeps them equal.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
SELECTOR=${FTNET_E2E_SELECTOR:?set FTNET_E2E_SELECTOR to poll, select or epoll (or run asyncio-<selector>.sh)}
e2e_init "asyncio-$SELECTOR" "$@"
[[ $FAULT != cut ]] || die "asyncio runs with none or kill"

REDIS_PORT=6379
RUNS=$(quick 2 3)
N_REQ=$(quick 3000 6000)
DROP=$(quick 50 100)
SERVER="python3 $E2E_DIR/respserver.py --selector $SELECTOR --port {port}"
lab_up --port "$REDIS_PORT" --shim --fault-drop "$N:$DROP" --failure-ms 3000 --server "$SERVER"

load() { # load RUN — the run's two loads; sets rc_mix, rc_app
	rc_mix=0 rc_app=0
	redis_bench "$T/append$1.out" -r 100 -n "$N_REQ" -q APPEND 'log:__rand_int__' 'v:__rand_int__' || rc_app=$?
	redis_bench "$T/mix$1.out" -r 1000 -n "$N_REQ" -q -t set,incr,lpush || rc_mix=$?
}

watch=${SURVIVORS[0]}
progress() { commands_of "$watch"; }
for ((run = 1; run <= RUNS; run++)); do
	if ((run == 1)); then fault_when $((N_REQ * $(random_pct 20 60) / 100)) $((4 * N_REQ)) progress commands; fi
	t0=$(now_ms)
	load "$run"
	if ((run == 1)); then fault_done; fi
	say "run $run: APPEND $(rps "$T/append$run.out")| mix $(rps "$T/mix$run.out")($(($(now_ms) - t0)) ms)"
	check_eq "run $run: redis-benchmark (APPEND) exit status" 0 "$rc_app"
	check_eq "run $run: redis-benchmark (mix) exit status" 0 "$rc_mix"
	check "run $run: no error in the APPEND output" no_errors "$T/append$run.out"
	check "run $run: no error in the mix's output" no_errors "$T/mix$run.out"
	settle "${SURVIVORS[@]}"
	same_digests "run $run" "${SURVIVORS[@]}"
done
for r in "${SURVIVORS[@]}"; do
	log=$(replica_dir "$r")/server.log
	check "r$r runs asyncio on the $SELECTOR selector" grep -qi "asyncio on ${SELECTOR}selector" "$log"
	check "r$r server log shows the shim ordering its input" grep -q "input follows the router's order" "$log"
	check "r$r shim never fell back to the kernel's order" bash -c "! grep -q 'replicas may diverge' '$log'"
done

if [[ $FAULT == none ]]; then
	# The control: the same load and loss without the shim.
	timeout 120 "$FTNET" lab down --name "$LAB" >/dev/null 2>&1
	lab_up --port "$REDIS_PORT" --fault-drop "$N:$DROP" --failure-ms 3000 --server "$SERVER"
	load control
	settle $(seq 1 "$N")
	ds=()
	for ((r = 1; r <= N; r++)); do ds+=("$(digest_of "$r")"); done
	distinct=$(printf '%s\n' "${ds[@]}" | sort -u | wc -l)
	errs=$(cat "$T/appendcontrol.out" "$T/mixcontrol.out" | tr '\r' '\n' | grep -Eic 'error' || true)
	say "control without the shim: exit $rc_app/$rc_mix, $errs error line(s), digests ${ds[*]}"
	check "without the shim the replicas diverge (distinct digests: $distinct) or the client gets spliced replies (errors: $errs)" \
		test "$distinct" -gt 1 -o "$errs" -gt 0
fi
e2e_finish
