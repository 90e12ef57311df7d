# Shared helpers for the ftnet end-to-end scenarios (sourced, not executed).
#
# Every scenario script is `tests/e2e/scenarios/<name>.sh N FAULT` with FAULT one of
# none|kill|cut. It brings up its own lab (name from $FTNET_E2E_LAB, or a fresh one), injects at
# most one fault into one replica (the "victim") at a random point *inside* the transfer, checks
# the client-visible result and the state of every surviving replica, and tears the lab down on
# every exit path. The runner (run.sh) only adds the matrix, time limits and the summary.
#
# Environment (all optional):
#   FTNET              the ftnet binary            (default: <repo>/target/release/ftnet)
#   FTNET_E2E_LAB      lab name, ≤ 8 chars [a-z0-9] (default: derived from $$)
#   FTNET_E2E_SEED     random seed                  (default: $RANDOM; printed, so reruns reproduce)
#   FTNET_E2E_VICTIM   force the replica to fault   (default: random in 1..N from the seed)
#   FTNET_E2E_QUICK=1  smaller transfers
#   FTNET_E2E_WORK     shared scratch dir for generated data (default: a private one, removed)
#   FTNET_E2E_ARTIFACTS  where evidence of a failed test is copied (default: /tmp/ftnet-e2e-artifacts)
#   FTNET_E2E_FAILURE_MS passed to `lab up --failure-ms` when set
#   FTNET_E2E_RATE_MBPS  cap on bulk transfer rates in MB/s (default 400; 0 = none), so that a
#                        transfer lasts long enough for the fault to land inside it

# Variables below are used by the scenario scripts that source this file.
# shellcheck disable=SC2034
E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$E2E_DIR/../.." && pwd)
FTNET=${FTNET:-$REPO/target/release/ftnet}
VIP=198.19.0.1
EMPTY_DIGEST=0000000000000000000000000000000000000000

# log_ms LINE → the wall-clock time of a ftnet log line (its RFC 3339 timestamp), in ms.
log_ms() {
	python3 -c 'import sys,datetime; ts=sys.argv[1].split()[0]; print(int(datetime.datetime.fromisoformat(ts.replace("Z","+00:00")).timestamp()*1000))' "$1"
}

now_ms() { date +%s%3N; }
ts() { date -u +%H:%M:%S.%3N; }
say() { printf '[%s] %s: %s\n' "$(ts)" "${E2E_TEST:-e2e}" "$*"; }
warn() { say "WARNING: $*" >&2; }
die() { say "ERROR: $*" >&2; exit 1; }

replica_ip() { echo "198.18.$((10 + $1)).2"; }
replica_dir() { echo "/run/ftnet/lab/$LAB/r$1"; }
quick() { if [[ ${FTNET_E2E_QUICK:-0} == 1 ]]; then echo "$1"; else echo "$2"; fi; }

lab() { "$FTNET" lab "$@"; }
# Runs CMD in namespace WHO (client, router, rN) of this test's lab.
in_ns() { local who=$1; shift; "$FTNET" lab exec --name "$LAB" "$who" -- "$@"; }

# e2e_init TESTNAME N FAULT — parse arguments, pick seed and victim, install the cleanup trap.
e2e_init() {
	E2E_TEST=$1
	N=${2:?usage: $0 N none|kill|cut|hang}
	FAULT=${3:?usage: $0 N none|kill|cut|hang}
	[[ $N =~ ^[1-9]$ ]] || die "N must be 1..9, got '$N'"
	case $FAULT in none | kill | cut | hang) ;; *) die "FAULT must be none|kill|cut|hang, got '$FAULT'" ;; esac
	[[ ${FTNET_E2E_SHIM:-0} == 1 ]] && E2E_TEST="shim-$E2E_TEST"
	[[ ${FTNET_E2E_VOTE:-0} == 1 ]] && E2E_TEST="vote-$E2E_TEST"
	E2E_TEST="$E2E_TEST/n$N-$FAULT"
	if [[ $FAULT != none && $N -lt 2 ]]; then
		die "a $FAULT with N=1 necessarily loses the connection (no replica left); use N>=2"
	fi
	[[ $(id -u) == 0 ]] || die "must run as root (network namespaces)"
	[[ -x $FTNET ]] || die "no ftnet binary at $FTNET (cargo build --release --locked)"
	LAB=${FTNET_E2E_LAB:-$(printf 's%05d' $(($$ % 100000)))}
	[[ $LAB =~ ^[a-z0-9]{1,8}$ ]] || die "bad lab name '$LAB'"
	SEED=${FTNET_E2E_SEED:-$RANDOM}
	RANDOM=$SEED
	VICTIM=${FTNET_E2E_VICTIM:-$((1 + RANDOM % N))}
	((VICTIM >= 1 && VICTIM <= N)) || die "victim $VICTIM not in 1..$N"
	SURVIVORS=()
	for ((i = 1; i <= N; i++)); do
		[[ $FAULT != none && $i == "$VICTIM" ]] || SURVIVORS+=("$i")
	done
	if [[ -n ${FTNET_E2E_WORK:-} ]]; then
		WORK=$FTNET_E2E_WORK
		OWN_WORK=0
	else
		mkdir -p /run/ftnet-e2e
		WORK=$(mktemp -d /run/ftnet-e2e/work.XXXXXX)
		OWN_WORK=1
	fi
	T=$WORK/$LAB
	rm -rf "$T"
	mkdir -p "$T"
	FAILS=0
	WATCHER_PID=
	LAB_STARTED=0
	trap e2e_on_exit EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	if [[ $FAULT == none ]]; then
		say "lab=$LAB N=$N no fault seed=$SEED"
		[[ $N == 1 ]] && say "N=1 is the baseline: with one replica a kill would necessarily lose the connection, so none is injected"
	else
		say "lab=$LAB N=$N fault=$FAULT victim=r$VICTIM survivors=${SURVIVORS[*]} seed=$SEED (rerun: FTNET_E2E_SEED=$SEED)"
	fi
	return 0
}

e2e_on_exit() {
	local rc=$?
	set +e
	trap - EXIT INT TERM
	if [[ -n $WATCHER_PID ]]; then kill "$WATCHER_PID" 2>/dev/null; wait "$WATCHER_PID" 2>/dev/null; fi
	if [[ -f $T/watchers.pid ]]; then
		local w
		for w in $(cat "$T/watchers.pid"); do kill "$w" 2>/dev/null; done
	fi
	# FTNET_E2E_EVIDENCE=always keeps the evidence of a passing test too.
	if { ((rc != 0)) || [[ -n ${FTNET_E2E_EVIDENCE:-} ]]; } && ((LAB_STARTED)); then collect_evidence; fi
	if ((LAB_STARTED)); then
		timeout 120 "$FTNET" lab down --name "$LAB" >/dev/null 2>&1 || warn "lab down --name $LAB failed"
	fi
	if ((OWN_WORK)); then rm -rf "$WORK"; else rm -rf "$T"; fi
	if ((rc == 0)); then say "PASS"; else say "FAIL (exit $rc)"; fi
	exit "$rc"
}

# Copies what a router/lab developer needs to look at into the artifacts directory.
collect_evidence() {
	local dest=${FTNET_E2E_ARTIFACTS:-/tmp/ftnet-e2e-artifacts}/${E2E_TEST//\//-}-$LAB
	mkdir -p "$dest"
	cp -r "$T/." "$dest/" 2>/dev/null
	# Large payloads are not evidence.
	find "$dest" -type f -size +1M -delete 2>/dev/null
	timeout 20 "$FTNET" lab status --name "$LAB" --json >"$dest/status.json" 2>&1
	if [[ -d /run/ftnet/lab/$LAB ]]; then
		cp /run/ftnet/lab/"$LAB"/router*.log* /run/ftnet/lab/"$LAB"/keepalived-*.log "$dest/" 2>/dev/null
		for d in /run/ftnet/lab/"$LAB"/r*/; do
			[[ -d $d ]] || continue
			local r; r=$(basename "$d")
			for f in server.log error.log agent.log; do
				[[ -f $d/$f ]] && tail -c 200000 "$d/$f" >"$dest/$r-$f"
			done
		done
	fi
	# Which MAC each host sends to for its gateway, against each router's MACs (a host still
	# sending to the router that lost the addresses shows here).
	{
		local ns
		for ns in $(ip netns list | awk '{print $1}' | grep "^ftnet-$LAB-"); do
			echo "== $ns"
			ip -n "$ns" -br link 2>/dev/null | grep -v '^lo '
			ip -n "$ns" neigh show 2>/dev/null
		done
	} >"$dest/neighbours.txt" 2>&1
	{
		echo "test=$E2E_TEST lab=$LAB N=$N fault=$FAULT victim=$VICTIM seed=$SEED"
		echo "ftnet=$FTNET"
		git -C "$REPO" rev-parse HEAD 2>/dev/null
		date -u
	} >"$dest/README"
	say "evidence in $dest"
}

# live_evidence TAG — the kernel's view of every lab namespace while the load still runs (a
# connection's state is gone once its client exits): TCP sockets with timers and counters
# (`ss -tinpo`), link counters (a TUN queue nobody reads shows as TX drops), the SNMP counters
# (forwarding drops) and the routing rules. Appended to $T/live-evidence.txt, which a failed
# test's artifacts keep.
live_evidence() {
	local out=${2:-$T/live-evidence.txt}
	# Never fatal: the scenarios run with errexit and pipefail, which a `| head -c` that cuts `ss`
	# short (SIGPIPE) would trip; the watchers that call this used to die on their first long
	# `ss` output, in the middle of a capture.
	(
		set +e +o pipefail
		echo "==== $1 at $(date -u +%FT%T.%3NZ)"
		local ns
		for ns in $(ip netns list | awk '{print $1}' | grep "^ftnet-$LAB-"); do
			echo "== $ns"
			ip netns exec "$ns" ss -tinpo state all 2>/dev/null | grep -v 'LISTEN' | head -c 20000
			# The processes there: state and CPU (a client stuck in its own loop shows here).
			local p
			for p in $(ip netns pids "$ns" 2>/dev/null); do
				ps -o pid=,stat=,pcpu=,etime=,args= -p "$p" 2>/dev/null | cut -c1-200
			done
			# A Redis there: its clients' buffers and last commands (over loopback, which
			# the shim leaves alone).
			if ps -o comm= -p $(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ') 2>/dev/null | grep -q redis-server; then
				ip netns exec "$ns" timeout 2 redis-cli -h 127.0.0.1 -p "${REDIS_PORT:-6379}" CLIENT LIST </dev/null 2>&1 | head -c 12000
			fi
			ip -n "$ns" -s link 2>/dev/null | head -c 8000
			ip netns exec "$ns" nstat -az 2>/dev/null | awk '$2 != 0' | head -c 8000
			if [[ $ns == *-router* ]]; then
				ip -n "$ns" rule
				echo "ip_forward=$(ip netns exec "$ns" cat /proc/sys/net/ipv4/ip_forward)"
			fi
		done
		timeout 10 "$FTNET" lab status --name "$LAB" --json 2>&1
	) >>"$out" 2>&1
	return 0
}

# watch_stalls — in the background until cleanup: every second, the kernel's view of the lab
# (live_evidence) into a ring of the last four; when the router evicts a replica as stalled
# (10 s without progress) or a join finds a connection that does not come to rest, the ring — taken while the replica was stuck — goes to
# $T/live-evidence.txt, once. A stuck replica is ended by its agent right after the eviction,
# so the state of its sockets must be taken before.
watch_stalls() {
	local log=$1
	(
		local i=0 f
		while :; do
			if grep -Eq "evicted \(stalled\)|could NOT join" "$log" 2>/dev/null; then
				for f in $(ls -tr "$T"/stall-ring.* 2>/dev/null); do cat "$f" >>"$T/live-evidence.txt"; done
				rm -f "$T"/stall-ring.*
				# And now: what is stuck often still is.
				live_evidence "stall watch, at the router's verdict"
				exit 0
			fi
			rm -f "$T/stall-ring.$((i % 4))"
			live_evidence "stall watch $i" "$T/stall-ring.$((i % 4))"
			i=$((i + 1))
			sleep 1
		done
	) &
	echo $! >>"$T/watchers.pid"
}

# watch_load SECONDS... — in the background: at each SECONDS after now, if $T/load.done does not
# exist yet (the scenario touches it when its load ends), record live_evidence; so a load that
# hangs leaves its sockets' state behind before it is killed. Cleanup stops the watcher.
watch_load() {
	(
		local start; start=$(now_ms)
		for s in "$@"; do
			while (($(now_ms) - start < s * 1000)); do
				[[ -e $T/load.done ]] && exit 0
				sleep 0.2
			done
			[[ -e $T/load.done ]] || live_evidence "load still running ${s} s after the watch began"
		done
	) &
	echo $! >>"$T/watchers.pid"
}

# rejoined_serves — after a join of $VICTIM (address $VADDR, Redis on $REDIS_PORT): the three
# replicas settle with equal digests, the victim serves new connections, and it joined once.
rejoined_serves() {
	local all=(1 2 3)
	settle "${all[@]}"
	same_digests "after the join" "${all[@]}"
	member_state() { # the victim's "state alive connections" in the router's status
		lab status --name "$LAB" --json | python3 -c "import json,sys; d=json.load(sys.stdin); r=[r for r in d['status']['services'][0]['replicas'] if r['addr'] == sys.argv[1]][0]; print(f\"{r['state']} {r['alive']} {r['connections']}\")" "$VADDR"
	}
	busy() { in_ns client redis-cli -h "$VIP" -p "$REDIS_PORT" INCR probe >/dev/null && [[ $(member_state) == serving\ True* ]]; }
	check "r$VICTIM serving and alive" wait_for 5 busy
	say "r$VICTIM: $(member_state)"
	local joins
	joins=$(grep -c "replica $VADDR JOINED" "$LOG" || true)
	check "r$VICTIM joined" test "$joins" -ge 1
	if ((joins > 1)); then
		# A known defect, reproduced by join-stress/n3-hang (not in the default run): now and then
		# a replica that serves, often one that joined or gave its state seconds before, is taken
		# out as stalled on one connection (its kernel acknowledged the client's request, its reply
		# never left) and joins again; the group stays whole and nothing reaches a client wrong.
		say "KNOWN DEFECT: r$VICTIM was taken out again after it joined and joined $joins times: $(grep "replica $VADDR evicted (stalled)" "$LOG" | tail -1)"
		echo "joined $joins times" >>"$T/known-defect.txt"
	fi
}

# stale_server_rejoins — a replica ($VICTIM, address $VADDR) whose server went stale comes back by
# itself: the router ($LOG) logs the server stale (its agent is told to end it), the supervisor
# starts a fresh one, and it joins. Sets joined_ms (the JOINED line's time) and pause (ms the input
# was paused), empty if it did not join.
stale_server_rejoins() {
	local line
	stale_line() { grep -m1 "replica $VADDR is out of service.*input" "$LOG"; }
	check "router found r$VICTIM's server stale and had its agent end it" wait_for 10 stale_line
	say "router: $(stale_line || true)"
	joined_line() { grep -m1 "replica $VADDR JOINED" "$LOG"; }
	check "r$VICTIM joined by itself with the group's state" wait_for 60 joined_line
	line=$(joined_line || true)
	say "router: ${line:-<no line>}"
	joined_ms= pause=
	if [[ -n $line ]]; then
		joined_ms=$(log_ms "$line")
		pause=$(sed -E 's/.*paused ([0-9]+) ms.*/\1/' <<<"$line")
	fi
	check "the supervisor started a fresh server" grep -q "starting it again" "/run/ftnet/lab/$LAB/r$VICTIM/server.log"
	{ grep -E "could NOT join" "$LOG" || true; } | head -5 | while read -r l; do say "router: $l"; done
}

# sighup_replicas ADDR... — the lab's config file ($CFG) lists these replicas from now on, and the
# router ($RPID) is told to read it again (SIGHUP).
sighup_replicas() {
	local list
	list=$(printf '"%s", ' "$@")
	sed -i "s/^replicas = .*/replicas = [${list%, }]/" "$CFG"
	kill -HUP "$RPID"
}

# joinload_finish PID — wait for joinload.py (its output in $T/load.json and $T/load.err) and
# check it: exit status 0 (no error, every counter exact) and no client error.
joinload_finish() {
	local rc=0 errors
	wait "$1" || rc=$?
	say "load: $(cat "$T/load.json" 2>/dev/null)"
	[[ -s $T/load.err ]] && say "load stderr: $(head -c 1000 "$T/load.err")"
	check_eq "writers: exit status (0 errors, every counter exact)" 0 "$rc"
	errors=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['errors'])" "$T/load.json" 2>/dev/null || echo "?")
	check_eq "client errors" 0 "$errors"
}

# lab_up ARGS... — `ftnet lab up` for this test's lab, bounded in time.
lab_up() {
	local extra=()
	[[ -n ${FTNET_E2E_FAILURE_MS:-} ]] && extra+=(--failure-ms "$FTNET_E2E_FAILURE_MS")
	# shim-* scenarios: every replica under the determinism shim (`ftnet run`), fed by an agent.
	[[ ${FTNET_E2E_SHIM:-0} == 1 ]] && extra+=(--shim)
	# vote-* scenarios: the service votes on the replicas' replies.
	[[ ${FTNET_E2E_VOTE:-0} == 1 ]] && extra+=(--vote majority)
	LAB_STARTED=1
	local t0; t0=$(now_ms)
	if ! timeout 180 "$FTNET" lab up --name "$LAB" --replicas "$N" "${extra[@]}" "$@" >"$T/lab-up.log" 2>&1; then
		cat "$T/lab-up.log" >&2
		die "lab up failed: $FTNET lab up --name $LAB --replicas $N ${extra[*]} $*"
	fi
	say "lab up in $(($(now_ms) - t0)) ms"
}

# e2e_data NAME MB — a file of MB MiB of random data in the shared work dir, made once.
e2e_data() {
	local f=$WORK/data/$1
	mkdir -p "$WORK/data"
	(
		flock 9
		if [[ ! -f $f ]]; then
			head -c "$(($2 * 1048576))" /dev/urandom >"$f.tmp"
			mv "$f.tmp" "$f"
		fi
	) 9>"$WORK/data/.lock"
	echo "$f"
}

sha() { sha256sum "$1" | cut -d' ' -f1; }

check() { # check DESCRIPTION CONDITION-COMMAND...
	local desc=$1; shift
	if "$@"; then say "ok: $desc"; else say "CHECK FAILED: $desc"; FAILS=$((FAILS + 1)); fi
}
check_eq() { # check_eq DESCRIPTION EXPECTED ACTUAL
	if [[ $2 == "$3" ]]; then say "ok: $1 ($3)"; else say "CHECK FAILED: $1: expected '$2', got '$3'"; FAILS=$((FAILS + 1)); fi
}

# random_fraction LO HI — a percentage in [LO, HI] drawn from the seeded $RANDOM.
# shellcheck disable=SC2034
RATE_MBPS=${FTNET_E2E_RATE_MBPS:-400}
random_pct() { echo $(($1 + RANDOM % ($2 - $1 + 1))); }

# fault_when THRESHOLD TOTAL PROGRESS-FUNCTION UNIT
# In the background, polls PROGRESS-FUNCTION (prints a number) and injects the test's fault into
# the victim as soon as progress reaches THRESHOLD, so the fault always lands inside the transfer.
# Records the moment in $T/fault.txt. No-op when FAULT=none.
fault_when() {
	local threshold=$1 total=$2 fn=$3 unit=$4
	[[ $FAULT == none ]] && return 0
	say "fault plan: $FAULT r$VICTIM when progress reaches $threshold of $total $unit ($((threshold * 100 / total))%)"
	rm -f "$T/fault.txt"
	(
		trap - EXIT
		t0=$(now_ms)
		deadline=$((t0 + 900000))
		while :; do
			p=$($fn 2>/dev/null) || p=0
			[[ $p =~ ^[0-9]+$ ]] || p=0
			if ((p >= threshold)); then
				t=$(now_ms)
				"$FTNET" lab "$FAULT" --name "$LAB" "$VICTIM" >"$T/fault.out" 2>&1
				frc=$?
				echo "fault=$FAULT victim=r$VICTIM delay_ms=$((t - t0)) progress=$p/$total $unit rc=$frc epoch_ms=$t" >"$T/fault.txt"
				say "FAULT injected: lab $FAULT r$VICTIM after $((t - t0)) ms at progress $p/$total $unit (rc=$frc, took $(($(now_ms) - t)) ms)"
				exit 0
			fi
			(($(now_ms) > deadline)) && exit 1
			sleep 0.002
		done
	) &
	WATCHER_PID=$!
}

# fault_done — after the transfer: stop the watcher and fail the test if no fault was injected
# (a fault-free run must not count as a pass for a fault scenario).
fault_done() {
	[[ $FAULT == none ]] && return 0
	kill "$WATCHER_PID" 2>/dev/null || true
	wait "$WATCHER_PID" 2>/dev/null || true
	WATCHER_PID=
	if [[ -f $T/fault.txt ]]; then
		check "fault command succeeded ($(cat "$T/fault.txt"))" grep -q 'rc=0' "$T/fault.txt"
	else
		say "CHECK FAILED: no fault was injected (the transfer ended before reaching the trigger point)"
		FAILS=$((FAILS + 1))
	fi
}

e2e_finish() {
	if ((FAILS)); then
		say "$FAILS check(s) failed"
		exit 1
	fi
	exit 0
}

# Writes the start script for an nginx replica into the work dir and prints the --server command.
# Arguments: the static file to serve as /big.bin (hard-linked, so every replica has the same
# bytes and the same mtime, hence the same Last-Modified and ETag) and whether to also listen on
# port+1 (a non-service port, for direct measurements that bypass the router's capture).
nginx_server_cmd() {
	local big=$1 direct=${2:-0}
	cat >"$WORK/nginx-start.sh" <<'SH'
#!/bin/sh
# nginx-start.sh DIR PORT BIGFILE DIRECT — one nginx replica, foreground, everything under DIR.
set -e
dir=${1%/} port=$2 big=$3 direct=$4
mkdir -p "$dir/www" "$dir/tmp/body" "$dir/tmp/proxy" "$dir/tmp/fastcgi" "$dir/tmp/uwsgi" "$dir/tmp/scgi"
if [ "$big" != - ]; then
	ln -f "$big" "$dir/www/big.bin" 2>/dev/null || cp -p "$big" "$dir/www/big.bin"
	# A small page: the first 64 KiB of it (the same on every replica).
	head -c 65536 "$big" >"$dir/www/small.bin"
	touch -r "$big" "$dir/www/small.bin"
fi
extra=""
[ "$direct" = 1 ] && extra="listen $((port + 1));"
# Under the determinism shim nginx runs as one process (no master): the supported architecture.
mp=""
[ "${FTNET_E2E_SHIM:-0}" = 1 ] && mp="master_process off;"
cat >"$dir/nginx.conf" <<CONF
user root;
$mp
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log info;
events { worker_connections 512; }
http {
    default_type application/octet-stream;
    access_log $dir/access.log;
    sendfile on;
    server_tokens off;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    server {
        listen $port;
        $extra
        root $dir/www;
        client_max_body_size 2g;
        location /upload/ {
            dav_methods PUT;
            create_full_put_path on;
            dav_access user:rw all:r;
            client_body_temp_path $dir/tmp/body;
        }
    }
}
CONF
exec nginx -p "$dir/" -e "$dir/error.log" -c "$dir/nginx.conf"
SH
	echo "sh $WORK/nginx-start.sh {dir} {port} '${big:--}' $direct"
}

# wait_for SECONDS COMMAND... — retry COMMAND every 0.2 s until it succeeds or time runs out.
# Replicas other than the fastest may lag the client-visible reply by a little.
wait_for() {
	local deadline=$(($(now_ms) + $1 * 1000)); shift
	until "$@"; do
		(($(now_ms) > deadline)) && return 1
		sleep 0.2
	done
}

# redis_at R ARGS... — redis-cli against replica R's own server, inside its namespace. (The
# router captures replies from replica IPs on service ports, so this cannot go via the router.)
redis_at() { local r=$1; shift; timeout 20 "$FTNET" lab exec --name "$LAB" "r$r" -- redis-cli -h 127.0.0.1 -p "${REDIS_PORT:-6379}" "$@"; }
# Concurrent Redis loads through the VIP (redis-order, asyncio): redis-benchmark -c 50 into OUT
# (returns its exit status); its output has no error; its requests per second; a replica's state.
redis_bench() { # redis_bench OUT ARGS...
	local out=$1; shift
	timeout 900 "$FTNET" lab exec --name "$LAB" client -- \
		redis-benchmark -h "$VIP" -p "${REDIS_PORT:-6379}" -c 50 "$@" >"$out" 2>&1
}
no_errors() { ! grep -Eiq 'error|reset|refused|timed out|timeout|closed|broken' "$1"; }
rps() { tr '\r' '\n' <"$1" | grep 'requests per second' | awk '{print $1, $2}' | tr '\n' ' '; }
digest_of() { redis_at "$1" DEBUG DIGEST | tr -d '\r'; }
commands_of() { redis_at "$1" INFO stats | tr -d '\r' | awk -F: '$1 == "total_commands_processed" { print $2 }'; }
same_digests() { # same_digests LABEL REPLICAS...
	local label=$1 first= d r; shift
	for r in "$@"; do
		d=$(digest_of "$r")
		say "$label: r$r DEBUG DIGEST $d"
		check "$label: r$r digest is not the empty-database digest" test "$d" != "$EMPTY_DIGEST" -a -n "$d"
		if [[ -z $first ]]; then first=$d; else check_eq "$label: r$r digest equals r$1's" "$first" "$d"; fi
	done
}
# lab_counter NAME — the router's counter NAME (`ftnet status --json`).
lab_counter() { lab status --name "$LAB" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["counters"][sys.argv[1]])' "$1"; }
# lab_alive — how many replicas of the lab's service are alive.
lab_alive() { lab status --name "$LAB" --json | python3 -c 'import json,sys; print(sum(1 for r in json.load(sys.stdin)["status"]["services"][0]["replicas"] if r["alive"]))'; }
# replica_procs R COMM — the pids of processes named COMM in replica R's namespace, one a line.
replica_procs() {
	local p
	for p in $(ip netns pids "ftnet-$LAB-r$1" 2>/dev/null); do
		[[ $(cat "/proc/$p/comm" 2>/dev/null) == "$2" ]] && echo "$p"
	done
	return 0
}

settle() { # settle REPLICAS... — let each finish applying (its command count stops moving)
	local r a b i still
	for r in "$@"; do
		still=0
		for i in 1 2 3 4 5 6 7 8 9 10; do
			a=$(commands_of "$r"); sleep 0.2; b=$(commands_of "$r")
			# The INFO that read `a` is counted in `b`: at rest they differ by one. At rest
			# twice in a row (a replica may pause for a resend of input it lacks).
			if [[ $a =~ ^[0-9]+$ && $b =~ ^[0-9]+$ ]] && ((b - a <= 1)); then
				((++still == 2)) && break
			else
				still=0
			fi
			# Still applying after 2 s: what the test reads next (digests, counters) may be
			# mid-way, so the log says so rather than letting a comparison fail unexplained.
			((i == 10)) && warn "settle: r$r still applying after 2 s (commands $a -> $b); reading it anyway"
		done
	done
	return 0
}

# idle_client_start IDLE_S AFTER [ARG...] — idleclient.py through the VIP in the background (pid in
# IDLE_PID): one INCR, then $T/ready, IDLE_S seconds idle, then AFTER more INCRs (more arguments
# go to idleclient.py, e.g. --keepalive 2).
idle_client_start() {
	timeout 60 "$FTNET" lab exec --name "$LAB" client -- \
		python3 "$E2E_DIR/idleclient.py" --host "$VIP" --port "$REDIS_PORT" --ready-file "$T/ready" \
		--idle "$1" --after "$2" "${@:3}" >"$T/idle.json" 2>"$T/idle.err" &
	IDLE_PID=$!
}
idle_client_ready() { wait_for 20 test -e "$T/ready" || die "client never became ready: $(cat "$T/idle.err")"; }

# idle_client_fault DELAY_S WHILE — with a fault, once the client idles: wait DELAY_S, then the
# fault on the victim (recorded in $T/fault.txt; WHILE says what the connection is doing).
idle_client_fault() {
	[[ $FAULT != none ]] || return 0
	idle_client_ready
	sleep "$1"
	local t frc=0
	t=$(now_ms)
	"$FTNET" lab "$FAULT" --name "$LAB" "$VICTIM" >"$T/fault.out" 2>&1 || frc=$?
	echo "fault=$FAULT victim=r$VICTIM while idle rc=$frc epoch_ms=$t" >"$T/fault.txt"
	say "FAULT injected: lab $FAULT r$VICTIM while $2 (rc=$frc)"
	check_eq "lab $FAULT exit status" 0 "$frc"
}

# idle_client_finish AFTER DESCRIPTION — wait for the client, check its exit status and that
# every survivor's counter is AFTER+1.
idle_client_finish() {
	local rc=0 r total=$(($1 + 1))
	wait "$IDLE_PID" || rc=$?
	say "client: $(cat "$T/idle.json" 2>/dev/null) $(head -c 1000 "$T/idle.err")"
	check_eq "$2 (client exit status)" 0 "$rc"
	for r in "${SURVIVORS[@]}"; do
		wait_for 5 test "$(redis_at "$r" GET idle:counter)" = "$total" || true
		check_eq "r$r counter" "$total" "$(redis_at "$r" GET idle:counter)"
	done
}
