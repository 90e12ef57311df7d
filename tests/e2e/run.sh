#!/usr/bin/env bash
# ftnet end-to-end matrix: real kernels, real servers (socat, nginx, redis) and real clients
# (socat, curl, redis-benchmark, redis-cli) in network namespaces, built by `ftnet lab`.
#
#   ns ftnet-<lab>-client          ns ftnet-<lab>-router                 ns ftnet-<lab>-r1..rN
#  +-------------------+        +------------------------+           +----------------------+
#  | client 198.18.1.2 |--veth--| ftnet router           |---veth----| r1 198.18.11.2       |
#  | curl, socat,      |        | VIP 198.19.0.1         |---veth----| r2 198.18.12.2       |
#  | redis-benchmark,  |        | multicasts each client |    ...    | rN 198.18.(10+N).2   |
#  | stallmeter.py     |        | segment, merges replies|           | server: socat echo / |
#  +-------------------+        +------------------------+           | nginx / redis-server |
#                                                                    +----------------------+
#  Faults: `ftnet lab kill <lab> i` = kill -9 of replica i's server (crash);
#          `ftnet lab cut <lab> i`  = replica i's link down (host loss).
#  Each fault hits one random replica at a random point inside the transfer (progress-triggered,
#  seeded; the seed is printed so a run can be repeated with --seed).
#
# Matrix: N=1 without fault (baseline: with one replica a kill necessarily loses the connection),
# N=2 and N=3 each with kill and with cut, for every scenario:
#   echo       50 MB random data round trip through the socat echo service, sha256 equal
#   nginx-get  100 MB static file via curl, sha256 equal
#   nginx-put  100 MB WebDAV PUT via curl -T, stored file correct on every surviving replica
#   redis      redis-benchmark -c 1 -n 100000 -t set,get,incr,lpush: no errors, survivors' DEBUG
#              DIGEST equal (and not empty), counters exact
#   redis-conc the same with 50 concurrent connections (-c 50); only with FTNET_E2E_CONC=1: the
#              replicas apply concurrent clients' commands in different orders, so their replies
#              (INCR values, LPUSH lengths) differ in bytes and length, and a failover mid-stream
#              splices two different streams. Deterministic input order across connections (the
#              agent and preload shim) is what makes this pass; until then it is expected to fail.
#   shortconn  2,000 short connections (redis-cli PING), all answer PONG
#   idle       a persistent connection idle while the fault hits (bare FIN from a killed replica),
#              then used again: every reply right, survivors agree, new connections work
#   stall      stallmeter.py: longest client-visible gap around a fault at ~2 s
#   hygiene    (N=2 only) `lab run` interrupted by SIGINT and by SIGKILL: nothing left behind
# Beyond the matrix: agents/n3-cut, drain/n2-none (graceful stop), status-page/n3-kill (the live
#   status page in headless chromium), flood/n3-none (SYN, garbage, ICMP, RST and ACK floods while
#   a legitimate client is measured), flood-control/n3-none (half-open and unauthenticated
#   connections to the control port, an agent that stops), package/n1-none (the Debian package installed by dpkg in a
#   private mount namespace, its units' commands run), operator/n2-none (a second router and SIGHUP do not disturb
#   the running one), spoof/n3-none (forged replica-sourced RST/ICMP from a client), impostor/n3-none
#   (an agent with the right secret posing as a replica), redis-order (input order), asyncio-{poll,select,epoll} (input
#   order for an asyncio server on each readiness call), redis-desync (Redis closing clients that
#   sent malformed requests leaves no hole in the order), redis-load (32 connections of
#   order-sensitive commands with the CPU loaded: nothing lost between router, agent and shim),
#   redis-orderlost (an agent killed mid-load: its replica leaves the group at once), router-hold/n3-none (the
#   router stopped 3 s under Redis load: its agents give it up and come back, nobody leaves), client-loss/n3-none (2 % of
#   the client's segments lost on its link: one duplicate ACK per segment reaches it, so its fast
#   retransmit keeps working), client-reset (clients that
#   reset at once: no replica's server stops, the input stays the same), stale-port/n3-none (a client
#   reusing its port while a replica still holds the port's earlier connection: that replica is
#   reset and serves, nobody is declared down), shim-* (scenarios under the shim),
#   vote (output voting: a divergent Redis replica evicted, the client gets the majority's bytes),
#   output (the default output policy: replies that differ between replicas are never spliced),
#   diverge (Redis run without the shim: its divergence detected, logged, the minority taken out),
#   vote-* (scenarios with output voting on) and takeover-{stall,get,put,synack,redis,connect} (two
#   routers under keepalived, the master killed 10 times in a row, see tests/e2e/README.md),
#   rejoin/n3-cut and rejoin-takeover/n3-kill (a replica that left the group is never readmitted by
#   its agent registering again, nor by a takeover; `ftnet replica enable` brings it back),
#   superseded/n3-none (only with FTNET_E2E_KNOWN=1 or by name; a router stalled, superseded by the
#   standby and serving again starts over instead of acting on its stale table, order and verdicts;
#   known to fail: 1 of 8 runs today, see the scenario),
#   server-reset/n1-none, n3-none (a server's RST after its acknowledged FIN reaches the client),
#   keepalive/n3-none, n3-kill (a client's TCP keep-alive probes on an idle connection are answered),
#   attack-client (a hostile client's raw packets against its own connection: no stall, no
#   replica marked down, the connection survives a blind RST), membership/n4-none (drain, add,
#   remove replicas of a running service under load: streams and new connections unharmed),
#   join/n3-kill (Redis under the shim: a killed replica restarted empty joins by itself with the
#   group's state, proven by digests, and takes part in the 20 connections open before it came),
#   join-outlive/n3-kill (r1, r2, r3 replaced in turn: the 20 connections outlive every replica),
#   join-cut/n3-cut (a replica whose link was cut for 5 s: its stale server is ended, its supervisor
#   starts a fresh one, and it joins by itself), join-hang/n3-hang (a replica whose server hangs
#   (SIGSTOP) is taken out, the router has its agent end the hung server, and the fresh one joins),
#   hang-writers/n3-hang (the same with long-lived writers only, whose commands the hung server's
#   kernel keeps acknowledging: taken out within 10x the detection time plus 2 s),
#   join-ops/n4-none (Redis under `ftnet run --supervise`: replicas added, drained, added back and
#   reloaded by SIGHUP under writers; each one serves only after joining with the group's state),
#   heal/n3-kill, heal/n3-cut, heal-nginx/n3-kill (a stateless service, socat or nginx, takes a
#   restarted replica, or a host that came back, back by itself). With FTNET_E2E_STRESS=1 also
#   join-stress/n3-hang (minutes of hang-and-join cycles under load; known to fail now and then).
#
# Usage: tests/e2e/run.sh [--quick] [--figures] [--only REGEX] [--seed S] [--list]
# A failed test runs once more (FTNET_E2E_RETRIES=0: not); passing then, it is listed as FLAKY
# with the first attempt's failed checks, and its first attempt's evidence is kept.
#   --quick    smaller transfers (10-20 MB, 20k requests, 500 connections)
#   --figures  also write the stall figures to tests/e2e/results/stalls-<date>.txt
#   --only     run only tests whose id (e.g. "redis/n2-kill") matches the extended regex
# A single test: tests/e2e/scenarios/<scenario>.sh N none|kill|cut|hang
# Needs root. Uses $FTNET or target/release/ftnet. Exit status non-zero if any test failed.
set -euo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$E2E_DIR/../.." && pwd)
export FTNET=${FTNET:-$REPO/target/release/ftnet}

quick=0 figures=0 only='' list=0
retries=${FTNET_E2E_RETRIES:-1}
seed=${FTNET_E2E_SEED:-$RANDOM}
while (($#)); do
	case $1 in
	--quick) quick=1 ;;
	--figures) figures=1 ;;
	--only) only=${2:?--only needs a regex}; shift ;;
	--seed) seed=${2:?--seed needs a number}; shift ;;
	--list) list=1 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "run.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
	esac
	shift
done

configs=("1 none" "2 kill" "2 cut" "3 kill" "3 cut")
scenarios=(echo nginx-get nginx-put redis shortconn idle stall)
[[ ${FTNET_E2E_CONC:-0} == 1 ]] && scenarios+=(redis-conc)
tests=()
for sc in "${scenarios[@]}"; do
	for cfg in "${configs[@]}"; do
		read -r n f <<<"$cfg"
		id="$sc/n$n-$f"
		[[ -z $only || $id =~ $only ]] && tests+=("$id")
	done
done
[[ -z $only || hygiene/n2-none =~ $only ]] && tests+=(hygiene/n2-none)
[[ -z $only || agents/n3-cut =~ $only ]] && tests+=(agents/n3-cut)
for id in operator/n2-none drain/n2-none package/n1-none ack-log/n3-none client-reset/n3-none client-loss/n3-none stale-port/n3-none spoof/n3-none impostor/n3-none redis-order/n3-none redis-order/n3-kill redis-desync/n3-none redis-load/n3-none redis-orderlost/n3-kill router-hold/n3-none asyncio-poll/n3-none asyncio-select/n3-kill asyncio-epoll/n3-kill \
	shim-echo/n3-kill shim-nginx-get/n3-kill shim-nginx-put/n3-cut \
	vote/n3-none vote/n3-kill vote-echo/n3-cut vote-nginx-get/n3-kill output/n3-none output/n3-kill diverge/n3-none determinism/n3-none determinism-nginx/n3-none vote-slow/n3-none closed-window/n3-none fin-behind/n3-none safe-delivery/n3-none \
	takeover-stall/n3-kill takeover-get/n3-kill takeover-put/n3-kill takeover-synack/n3-kill \
	takeover-redis/n3-kill takeover-connect/n3-kill takeover-stall/n3-cut \
	rejoin/n3-cut rejoin-takeover/n3-kill server-reset/n1-none server-reset/n3-none keepalive/n3-none keepalive/n3-kill \
	attack-client/n3-none flood/n3-none flood-control/n3-none campaign/n3-none membership/n4-none status-page/n3-kill heal/n3-kill heal/n3-cut heal-nginx/n3-kill join/n3-kill join-outlive/n3-kill join-cut/n3-cut join-hang/n3-hang hang-writers/n3-hang join-ops/n4-none; do
	[[ -z $only || $id =~ $only ]] && tests+=("$id")
done
# Stress runs (long; known to fail now and then: see the scenario): only when asked for.
if [[ ${FTNET_E2E_STRESS:-0} == 1 ]]; then
	[[ -z $only || join-stress/n3-hang =~ $only ]] && tests+=(join-stress/n3-hang)
fi
# Known to fail now and then (see the scenario): only when asked for (FTNET_E2E_KNOWN=1), or by name.
if [[ ${FTNET_E2E_KNOWN:-0} == 1 || ( -n $only && superseded/n3-none =~ $only ) ]]; then
	tests+=(superseded/n3-none)
fi
if ((list)); then printf '%s\n' "${tests[@]}"; exit 0; fi
((${#tests[@]})) || { echo "run.sh: no test matches '$only'" >&2; exit 2; }

if [[ $(id -u) != 0 ]]; then
	echo "run.sh: the end-to-end tests need root (network namespaces); not running them" >&2
	exit 1
fi
[[ -x $FTNET ]] || { echo "run.sh: no ftnet binary at $FTNET; build with cargo build --release --locked" >&2; exit 1; }
missing=()
for tool in ip timeout flock sha256sum socat nginx redis-server redis-cli redis-benchmark curl python3 keepalived; do
	command -v "$tool" >/dev/null || missing+=("$tool")
done
((${#missing[@]} == 0)) || { echo "run.sh: missing tools: ${missing[*]} (scripts/test.sh installs them)" >&2; exit 1; }

mkdir -p /run/ftnet-e2e
WORK=$(mktemp -d /run/ftnet-e2e/run.XXXXXX)
export FTNET_E2E_WORK=$WORK FTNET_E2E_QUICK=$quick
export FTNET_E2E_ARTIFACTS=${FTNET_E2E_ARTIFACTS:-/tmp/ftnet-e2e-artifacts/$(date -u +%Y%m%dT%H%M%S)}
current_lab=
cleanup() {
	set +e
	[[ -n $current_lab ]] && timeout 60 "$FTNET" lab down --name "$current_lab" >/dev/null 2>&1
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

export FTNET_E2E_RUN_ID="$$-$seed"
if ((figures)); then
	mkdir -p "$E2E_DIR/results"
	FTNET_E2E_FIGURES=$E2E_DIR/results/stalls-$(date -u +%Y-%m-%d).txt
	export FTNET_E2E_FIGURES
	touch "$FTNET_E2E_FIGURES"
	flock "$FTNET_E2E_FIGURES" cat >>"$FTNET_E2E_FIGURES" <<HDR
# run=$FTNET_E2E_RUN_ID: ftnet stall figures, $(date -u +%FT%TZ), $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$REPO" diff --quiet 2>/dev/null || echo '+dirty'), $(uname -r), $(nproc) cores
# stallmeter.py: 4 KB every 1 ms through the VIP to the socat echo service, ~6 s, fault at ~2 s;
# max_gap_ms = longest time between two consecutive receipts of echo data after 0.5 s warm-up;
# fault_gap_ms = the longest gap open at the fault or starting within 2 s after it ("<x": none of
# the 20 largest gaps was there, so the fault caused no gap above x ms); baseline gaps are ~1-9 ms.
# Lines carry run=...; concurrent runs on one machine interleave here and disturb each other.
HDR
fi

# Each test gets its own seed derived from the run's seed and its id, so --only reproduces it.
test_seed() { echo $(((seed + $(printf %s "$1" | cksum | cut -d' ' -f1)) % 32768)); }
limit=$((quick ? 180 : 420))

echo "== ftnet e2e: ${#tests[@]} tests, seed $seed (repeat with --seed $seed), binary $FTNET"
echo "== $(date -u +%FT%TZ); failure evidence goes to $FTNET_E2E_ARTIFACTS"
results=() failures=()
passed=0 failed=0 idx=0
t_start=$(date +%s)
# One attempt at test $id; sets rc, dt and log.
attempt() {
	current_lab=$(printf 'e%04d%02d' $(($$ % 10000)) $((idx % 100)))
	echo
	echo "---- [$idx/${#tests[@]}] $id (lab $current_lab)${1:+ $1} ----"
	# A leftover of a killed earlier run could carry the same name; down is idempotent.
	timeout 60 "$FTNET" lab down --name "$current_lab" >/dev/null 2>&1 || true
	local t0
	t0=$(date +%s)
	rc=0
	log=$WORK/test-$idx${1:+-retry}.log
	FTNET_E2E_LAB=$current_lab FTNET_E2E_SEED=$(test_seed "$id") \
		timeout -k 20 "$limit" "$E2E_DIR/scenarios/$sc.sh" "$n" "$f" > >(tee "$log") 2>&1 || rc=$?
	dt=$(($(date +%s) - t0))
	# Belt and braces: the scenario tears its lab down itself, even on failure.
	timeout 60 "$FTNET" lab down --name "$current_lab" >/dev/null 2>&1 || true
	current_lab=
}
why_failed() { ((rc == 124 || rc == 137)) && echo "timed out after ${limit}s" || echo "exit $rc"; }
flaky=() n_flaky=0
for id in "${tests[@]}"; do
	idx=$((idx + 1))
	sc=${id%%/*} cfg=${id#*/n}
	n=${cfg%%-*} f=${cfg#*-}
	attempt
	first=
	if ((rc != 0 && retries > 0)); then
		# A failure is always reported; a test that passes on its second attempt counts as passed
		# but is listed as FLAKY with the first attempt's failed checks (and its evidence kept).
		first="$(why_failed), ${dt}s"
		firstlog=$log
		attempt "(second attempt; the first failed: $first)"
		if ((rc == 0)); then
			n_flaky=$((n_flaky + 1))
			flaky+=("---- $id: FLAKY: failed first ($first), passed on the second attempt; first attempt's failed checks:" "$(grep -E 'CHECK FAILED|ERROR|failed|panicked' "$firstlog" | head -10)")
		fi
	fi
	if ((rc == 0)); then
		passed=$((passed + 1))
		if [[ -n $first ]]; then
			results+=("FLAKY $id  (${dt}s; the first attempt failed: $first)")
		else
			results+=("PASS  $id  (${dt}s)")
		fi
	else
		failed=$((failed + 1))
		results+=("FAIL  $id  (${dt}s, $(why_failed)${first:+; first attempt: $first})")
		# The failing checks and the test's last lines again, for logs that keep only the end.
		failures+=("---- $id: failed checks" "$(grep -E 'CHECK FAILED|ERROR|failed|panicked|KNOWN DEFECT' "$log" | cut -c1-400 | head -12)")
	fi
done

echo
echo "== summary ($(($(date +%s) - t_start)) s, seed $seed)"
printf '%s\n' "${results[@]}"
# Failures and FLAKY tests last, with their failed checks: a CI log that keeps only its end
# still says why.
echo
((${#failures[@]})) && printf '%s\n' "${failures[@]}"
((${#flaky[@]})) && printf '%s\n' "${flaky[@]}"
((figures)) && echo "stall figures appended to $FTNET_E2E_FIGURES"
((failed)) && echo "failure evidence: $FTNET_E2E_ARTIFACTS"
echo "$passed passed ($n_flaky of them FLAKY: only on the second attempt), $failed failed"
((failed == 0))
