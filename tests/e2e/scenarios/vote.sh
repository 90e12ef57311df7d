#!/usr/bin/env bash
# (k) Output voting: Redis × 3 with `vote = "majority"`, every replica under the determinism shim
# (so concurrent clients get identical replies from healthy replicas). r3 is made divergent: one
# key holds another value there (written on its loopback, which the router does not see), so its
# replies differ from the others' at a known byte of the client's stream.
# Pass:
#  - one client connection GETs an agreed key, the divergent key, and INCRs: it reads exactly the
#    majority's replies; the router logs r3 as diverged at that exact stream offset (12), evicts it
#    and marks it down; the divergence counter is 1;
#  - then redis-benchmark -c 20 (set,get,incr,lpush) through the VIP on the two that remain, with
#    FAULT=kill one of them killed during the load: 0 client errors, counters exact, no healthy
#    replica called divergent (the shim keeps concurrent replies identical; the killed one may be,
#    when its kernel's FIN cuts a reply short), the healthy survivors' DEBUG DIGEST equal.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# The victim of a kill is one of the two healthy replicas (r3 is the divergent one).
export FTNET_E2E_VICTIM=${FTNET_E2E_VICTIM:-$((1 + $$ % 2))}
e2e_init vote "$@"
[[ $N == 3 ]] || die "vote runs with three replicas (r3 divergent)"
[[ $FAULT != cut ]] || die "vote runs with none or kill"
((VICTIM <= 2)) || die "the victim must be r1 or r2 (r3 is the divergent replica)"

REDIS_PORT=6379
REQS=$(quick 10000 20000)
TOTAL=$((4 * REQS))
lab_up --port "$REDIS_PORT" --shim --vote majority
LOG=/run/ftnet/lab/$LAB/router.log
vip() { timeout 20 "$FTNET" lab exec --name "$LAB" client -- redis-cli -h "$VIP" -p "$REDIS_PORT" "$@"; }
status_json() { lab status --name "$LAB" --json; }

check_eq "SET through the VIP" OK "$(vip SET x x | tr -d '\r')"
for r in 1 2; do redis_at "$r" SET greeting majority >/dev/null; done
redis_at 3 SET greeting minority >/dev/null
say "r3 diverges: GET greeting answers 'minority' there, 'majority' on r1 and r2"

# One connection, Redis inline commands (not redis-cli's interactive mode: it first asks for
# COMMAND DOCS, whose order differs between Redis processes — real divergence the vote catches).
# Replies: "$1\r\nx\r\n" (7 bytes), then "$8\r\nmajority\r\n" against "$8\r\nminority\r\n": the
# first differing byte is byte 5 of the second reply, byte 12 of the stream.
printf 'GET x\r\nGET greeting\r\nINCR n\r\n' |
	timeout 20 "$FTNET" lab exec --name "$LAB" client -- socat -t 2 - "TCP:$VIP:$REDIS_PORT" >"$T/replies.txt" 2>&1 || true
say "client read: $(tr -d '\r' <"$T/replies.txt" | tr '\n' ' ')"
check_eq "the client read the majority's replies" '$1 x $8 majority :1' "$(tr -d '\r' <"$T/replies.txt" | tr '\n' ' ' | sed 's/ $//')"
line=$(grep -m1 "diverged at reply byte" "$LOG" || true)
say "router: ${line:-<no divergence logged>}"
check "router logged r3's divergence at stream byte 12" grep -q "replica $(replica_ip 3) diverged at reply byte 12: its bytes differ from what 2 of 3 live replicas sent" "$LOG"
check "router evicted r3 as diverged" grep -q "replica $(replica_ip 3) evicted (diverged)" "$LOG"
# (the status snapshot is refreshed every 250 ms)
r3_alive() { status_json | python3 -c "import json,sys; d=json.load(sys.stdin); print([r['alive'] for r in d['status']['services'][0]['replicas'] if r['addr'] == '$(replica_ip 3)'][0])"; }
divergences() { status_json | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["counters"]["divergences"])'; }
wait_for 2 test "$(r3_alive)" = False || true
check_eq "r3 marked down for the service" False "$(r3_alive)"
check_eq "divergences counted" 1 "$(divergences)"

# Load on the two healthy replicas, concurrent clients, a kill of one of them with FAULT=kill.
healthy=()
for r in "${SURVIVORS[@]}"; do ((r != 3)) && healthy+=("$r"); done
watch=${healthy[0]}
progress() { redis_at "$watch" INFO stats | tr -d '\r' | awk -F: '$1 == "total_commands_processed" { print $2 }'; }
fault_when $((TOTAL * $(random_pct 10 60) / 100)) "$TOTAL" progress commands
t0=$(now_ms)
rc=0
timeout 600 "$FTNET" lab exec --name "$LAB" client -- \
	redis-benchmark -h "$VIP" -p "$REDIS_PORT" -c 20 -n "$REQS" -t set,get,incr,lpush -q \
	>"$T/bench.out" 2>&1 || rc=$?
dt=$(($(now_ms) - t0))
fault_done
tr '\r' '\n' <"$T/bench.out" | grep -v 'rps=' | grep -v '^ *$' | sed 's/^/    /' || true
say "benchmark took $dt ms"
check_eq "redis-benchmark exit status" 0 "$rc"
check "no error in redis-benchmark output" \
	bash -c "! grep -Eiq 'error|reset|refused|timed out|timeout|closed|broken' '$T/bench.out'"
check_eq "completed tests" 4 "$(tr '\r' '\n' <"$T/bench.out" | grep -c 'requests per second' || true)"
check_eq "INCR counter through the VIP" "$REQS" "$(vip GET 'counter:__rand_int__' | tr -d '\r')"
check_eq "LPUSH list length through the VIP" "$REQS" "$(vip LLEN mylist | tr -d '\r')"
sleep 0.3
# No healthy replica is ever called divergent. A killed one may be: its kernel closes its sockets,
# and a FIN in the middle of a reply is a replica closing early, which diverges by design.
killed=
[[ $FAULT != none ]] && killed="replica $(replica_ip "$VICTIM") "
others=$(awk -v r3="replica $(replica_ip 3) " -v k="$killed" \
	'/diverged at reply byte/ && !index($0, r3) && (k == "" || !index($0, k))' "$LOG" | wc -l)
check_eq "no healthy replica called divergent under concurrent load" 0 "$others"
if [[ $FAULT == none ]]; then
	check_eq "no further divergence under concurrent load" 1 "$(divergences)"
fi
first=
for r in "${healthy[@]}"; do
	wait_for 10 test "$(redis_at "$r" GET 'counter:__rand_int__' | tr -d '\r')" = "$REQS" || true
	d=$(redis_at "$r" DEBUG DIGEST | tr -d '\r')
	say "r$r DEBUG DIGEST $d"
	check "r$r digest is not the empty-database digest" test "$d" != "$EMPTY_DIGEST" -a -n "$d"
	if [[ -z $first ]]; then first=$d; else check_eq "r$r digest equals r${healthy[0]}'s" "$first" "$d"; fi
done
e2e_finish
