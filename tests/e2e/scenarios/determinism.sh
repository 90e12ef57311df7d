#!/usr/bin/env bash
# Deterministic replicas (time, timers and randomness from the sequencer): Redis × 3 under the shim
# with `vote = "majority"`, so every reply byte is compared across the replicas and one that
# differs evicts its replica. Four concurrent writers, each in rounds over ~4 s (so the load spans
# hundreds of the router's clock ticks and several second boundaries), send commands whose replies
# depend on the server's clock or random numbers:
#   SET … PX 10..500 (keys that expire while others read them), GET/PTTL/EXISTS racing that
#   expiry, EXPIRE, TIME, SADD + SPOP + SRANDMEMBER, RANDOMKEY, Lua math.random, INCR.
# Pass: every writer exits 0; no replica evicted, no divergence counted; TIME's answers are within
# 2 s of this host's clock; after the TTL keys expired, every replica's DEBUG DIGEST is equal.
# FAULT=none also runs two controls, where the vote must take a replica out:
#  - the clock: the same load with the router's ticks off (`--tick-ms 0`: the servers keep the
#    kernel's clock);
#  - the random bytes: ticks on, but r3's server gets a hello whose seed differs in one bit (its
#    `ftnet run` hands it the agent's hello; the server command rewrites it), so r3's getrandom and
#    /dev/urandom differ (Redis's dict hash seed: RANDOMKEY and SPOP pick differently).
# The ticks and the group's seed are what keep the replicas' replies equal.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init determinism "$@"
[[ $N == 3 ]] || die "determinism runs with three replicas (a majority against one)"
[[ $FAULT == none ]] || die "determinism runs with FAULT=none"

REDIS_PORT=6379
ROUNDS=$(quick 10 20)
PER_ROUND=40
LOG=/run/ftnet/lab/$LAB/router.log
status_json() { lab status --name "$LAB" --json; }
divergences() { status_json | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["counters"]["divergences"])'; }
alive() { status_json | python3 -c 'import json,sys; print(sum(1 for r in json.load(sys.stdin)["status"]["services"][0]["replicas"] if r["alive"]))'; }

# commands WRITER ROUND: one round of a writer's commands, inline protocol.
commands() {
	python3 - "$1" "$2" "$PER_ROUND" <<'PY'
import random, sys
w, rnd, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(w * 1000 + rnd)
for i in range(n):
    k = rng.randrange(40)
    c = rng.randrange(12)
    if c == 0: print(f"SET ttl:{k} w{w}r{rnd}i{i} PX {rng.randrange(10, 501)}")
    elif c == 1: print(f"GET ttl:{k}")
    elif c == 2: print(f"PTTL ttl:{k}")
    elif c == 3: print(f"EXISTS ttl:{k} ttl:{(k + 1) % 40}")
    elif c == 4: print(f"SET p:{k % 10} x"); print(f"EXPIRE p:{k % 10} 1")
    elif c == 5: print("TIME")
    elif c == 6: print(f"SADD s{w} {rng.randrange(100)} {rng.randrange(100)} {rng.randrange(100)}")
    elif c == 7: print(f"SPOP s{w}")
    elif c == 8: print(f"SRANDMEMBER s{w} 2")
    elif c == 9: print("RANDOMKEY")
    elif c == 10: print('EVAL "return math.random(1000000)" 0')
    else: print(f"INCR n{w}")
PY
}

# load TAG: four writers, each one connection, ROUNDS rounds 0.2 s apart; replies in $T/TAG.W.
load() {
	local tag=$1 pids=() w rc=0
	for w in 1 2 3 4; do
		(
			for ((r = 0; r < ROUNDS; r++)); do
				commands "$w" "$r"
				sleep 0.2
			done
		) | timeout 120 "$FTNET" lab exec --name "$LAB" client -- socat -t 3 - "TCP:$VIP:$REDIS_PORT" >"$T/$tag.$w" 2>&1 &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || rc=$?; done
	return "$rc"
}

lab_up --port "$REDIS_PORT" --shim --vote majority
t_host=$(date +%s)
rc=0
load run || rc=$?
check_eq "the writers' exit status" 0 "$rc"
lines=$(cat "$T"/run.* | wc -l)
say "the writers read $lines reply lines"
check "the writers read replies" test "$lines" -gt $((4 * ROUNDS * PER_ROUND / 2))
check "no error reply" bash -c "! grep -q '^-' $T/run.*"
check "no replica evicted" bash -c "! grep -q 'evicted' '$LOG'"
check_eq "divergences counted" 0 "$(divergences)"
check_eq "replicas alive" 3 "$(alive)"
# TIME answers: "*2", "$10", "<seconds>", "$6", "<µs>": the seconds within 2 s of this host's.
secs=$(cat "$T"/run.* | tr -d '\r' | grep -A2 '^\*2$' | grep -E '^[0-9]{10}$' | sort -n | sed -n '1p;$p' | tr '\n' ' ')
say "TIME answered seconds from ${secs% } (this host: $t_host to $(date +%s))"
first=${secs%% *}
check "TIME is the router's clock (within 2 s of this host's)" test "$((first - t_host))" -ge -2 -a "$((first - t_host))" -le 10
for r in 1 2 3; do
	check "r$r: the shim gave the server the group's clock" grep -q "input follows the router's order" "$(replica_dir "$r")/server.log"
	check "r$r: the shim got the agent's hello" bash -c "! grep -q 'no hello from the agent' '$(replica_dir "$r")/server.log'"
done
# The TTL keys are gone after 0.5 s (the servers' cron expires them at the ticks).
sleep 1.5
settle 1 2 3
same_digests "after the load" 1 2 3

# The control: the same load with the servers on the kernel's clock.
cp "$LOG" "$T/router-run.log"
for r in 1 2 3; do cp "$(replica_dir "$r")/server.log" "$T/r$r-server-run.log"; done
timeout 120 "$FTNET" lab down --name "$LAB" >/dev/null 2>&1
lab_up --port "$REDIS_PORT" --shim --vote majority --tick-ms 0
load control || true
sleep 0.5
n_alive=$(alive)
say "control (no ticks): $(divergences) divergence(s), $n_alive replica(s) left"
check "control: without the router's clock a replica's replies differ and it is evicted" test "$n_alive" -lt 3

# The second control: the clock from the router, r3's random bytes from another seed.
cp "$LOG" "$T/router-control.log"
timeout 120 "$FTNET" lab down --name "$LAB" >/dev/null 2>&1
# shellcheck disable=SC2016 # expanded by the replica's sh -c
other_seed='if [ "$FTNET_REPLICA" = 3 ]; then case $FTNET_SHIM_HELLO in 0*) h=1${FTNET_SHIM_HELLO#?};; *) h=0${FTNET_SHIM_HELLO#?};; esac; export FTNET_SHIM_HELLO=$h; fi; '
lab_up --port "$REDIS_PORT" --shim --vote majority \
	--server "${other_seed}exec redis-server --port {port} --bind 0.0.0.0 --save '' --appendonly no --protected-mode no --enable-debug-command yes --dir {dir}"
load random || true
sleep 0.5
n_alive=$(alive)
say "control (r3's random bytes from another seed): $(divergences) divergence(s), $n_alive replica(s) left"
check "control: with another seed r3's replies differ and it is evicted" test "$n_alive" -lt 3
check "control: the replica evicted is r3" grep -q "198.18.13.2.*evicted\|evicted.*198.18.13.2" "$LOG"
e2e_finish
