#!/usr/bin/env bash
# ftnet benchmark suite: COSCANet-FT's evaluation (§IV, Tables I and II) on network namespaces,
# every setup side by side in one run. See bench/README.md.
#
#   bench/run.sh [--reps N] [--quick] [--setups "native kernel-fwd ..."] [--no-crash] [--out DIR]
#
# Needs root. Writes bench/results/<date>-<shortsha>.{json,md,svg} (or --out DIR).
set -uo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH/.." && pwd)
FTNET=${FTNET:-$REPO/target/release/ftnet}

REPS=3
QUICK=0
CRASH=1
SETUPS="native kernel-fwd kernel-nat haproxy ftnet-N1 ftnet-N2 ftnet-N3"
OUT=$BENCH/results
usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; }
while (($#)); do
	case $1 in
	--reps) REPS=${2:?}; shift ;;
	--quick) QUICK=1 ;;
	--setups) SETUPS=${2:?}; shift ;;
	--no-crash) CRASH=0 ;;
	--out) OUT=${2:?}; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "run.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
[[ $REPS =~ ^[1-9][0-9]?$ ]] || { echo "run.sh: --reps must be 1..99" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "run.sh: needs root (network namespaces)" >&2; exit 1; }

# Sizes. --quick: smaller files and fewer round trips; repetitions as given (default 3 → 2).
if ((QUICK)); then
	BIG_MB=256 SMALL_MB=10 UP_MB=50 RR_COUNT=2000 CPS_SECONDS=2 IDLE_CONNS=2000
	[[ $REPS == 3 ]] && REPS=2
else
	BIG_MB=1024 SMALL_MB=10 UP_MB=100 RR_COUNT=5000 CPS_SECONDS=3 IDLE_CONNS=10000
fi
CRASH_REPS=$REPS
HTTP=8080 ECHO=7000 SINK=9000

for t in ip nginx curl socat python3 nft haproxy; do
	if ! command -v "$t" >/dev/null; then
		case $t in
		nft) pkg=nftables ;; *) pkg=$t ;;
		esac
		echo "== installing $pkg"
		DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y "$pkg" >/dev/null || { echo "run.sh: need $t" >&2; exit 1; }
	fi
done
if [[ ! -x $FTNET ]]; then
	(cd "$REPO" && timeout 1800 cargo build --release --locked) || exit 1
fi
# haproxy is a tool here, not a service: make sure Debian's unit is not what we measure.

ID=$$
TAG=$((ID % 10000))
WORK=$(mkdir -p /run/ftnet-bench && mktemp -d "/run/ftnet-bench/run.$ID.XXXX")
RAW=$WORK/raw.jsonl
: >"$RAW"
DATA=$WORK/data
mkdir -p "$DATA"
LABS=()     # ftnet labs this run brought up (and still may have up)
PGIDS=()    # process groups started with setsid in our own namespaces
NSES=()     # namespaces created by this run

now_ms() { date +%s%3N; }
say() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

cleanup() {
	set +e
	trap - EXIT INT TERM
	for g in "${PGIDS[@]}"; do kill -9 -- "-$g" 2>/dev/null; done
	for l in "${LABS[@]}"; do timeout 60 "$FTNET" lab down --name "$l" >/dev/null 2>&1; done
	for ns in "${NSES[@]}"; do
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
		ip netns del "$ns" 2>/dev/null
	done
	# anything of ours that the lists above missed
	for ns in $(ip netns list 2>/dev/null | awk -v p="fb-$ID-" 'index($1, p) == 1 { print $1 }'); do
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
		ip netns del "$ns" 2>/dev/null
	done
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 141' PIPE

say "run $ID: reps=$REPS quick=$QUICK setups=[$SETUPS] crash=$CRASH work=$WORK"
say "generating data: ${SMALL_MB} MiB and ${BIG_MB} MiB"
head -c $((SMALL_MB << 20)) /dev/urandom >"$DATA/small.bin"
head -c $((BIG_MB << 20)) /dev/urandom >"$DATA/big.bin"
SERVER_CMD="sh $BENCH/servers.sh {dir} $DATA $HTTP $ECHO $SINK"

# ---------------------------------------------------------------- topology for non-ftnet setups
nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
mkns() {
	ip netns add "$1" || return 1
	NSES+=("$1")
	nsx "$1" ip link set lo up
	nsx "$1" sysctl -qw net.ipv4.tcp_tw_reuse=1 net.ipv4.ip_local_port_range="1024 65000"
}
veth() { # veth NS_A IF_A ADDR_A NS_B IF_B ADDR_B
	ip link add "$2" netns "$1" type veth peer name "$5" netns "$4" || return 1
	nsx "$1" ip addr add "$3" dev "$2" && nsx "$1" ip link set "$2" up
	nsx "$4" ip addr add "$6" dev "$5" && nsx "$4" ip link set "$5" up
}
# start_servers NS DIR — servers.sh in NS, in its own process group; waits until it listens.
start_servers() {
	local ns=$1 dir=$2 i
	mkdir -p "$dir"
	setsid ip netns exec "$ns" sh "$BENCH/servers.sh" "$dir" "$DATA" $HTTP $ECHO $SINK >"$dir/server.log" 2>&1 &
	PGIDS+=($!)
	disown $!
	for ((i = 0; i < 100; i++)); do
		if [[ $(nsx "$ns" ss -Hltn "( sport = :$HTTP or sport = :$ECHO or sport = :$SINK )" | wc -l) -ge 3 ]]; then return 0; fi
		sleep 0.1
	done
	echo "servers in $ns did not come up: $(tail -c 500 "$dir/server.log")" >&2
	return 1
}

declare -A CLIENT_NS TARGET LABNAME
# setup_up NAME — builds the setup; sets CLIENT_NS[NAME] (or LABNAME) and TARGET[NAME].
setup_up() {
	local s=$1 p="fb-$ID-${1%%-*}" c m sv
	case $s in
	native)
		c=$p-c sv=$p-s
		mkns "$c" && mkns "$sv" || return 1
		veth "$c" eth0 10.250.0.1/24 "$sv" eth0 10.250.0.2/24 || return 1
		start_servers "$sv" "$WORK/$s" || return 1
		CLIENT_NS[$s]=$c TARGET[$s]=10.250.0.2 ;;
	kernel-fwd | kernel-nat | haproxy)
		p="fb-$ID-$s" c=$p-c m=$p-m sv=$p-s
		mkns "$c" && mkns "$m" && mkns "$sv" || return 1
		veth "$c" eth0 10.250.1.2/24 "$m" eth0 10.250.1.1/24 || return 1
		veth "$m" eth1 10.250.2.1/24 "$sv" eth0 10.250.2.2/24 || return 1
		nsx "$c" ip route add default via 10.250.1.1 || return 1
		nsx "$sv" ip route add default via 10.250.2.1 || return 1
		start_servers "$sv" "$WORK/$s" || return 1
		CLIENT_NS[$s]=$c
		case $s in
		kernel-fwd)
			nsx "$m" sysctl -qw net.ipv4.ip_forward=1
			TARGET[$s]=10.250.2.2 ;;
		kernel-nat)
			nsx "$m" sysctl -qw net.ipv4.ip_forward=1
			nsx "$m" nft -f - <<-NFT || return 1
				table ip fbnat {
				  chain pre {
				    type nat hook prerouting priority dstnat; policy accept;
				    ip daddr 10.250.9.1 tcp dport { $HTTP, $ECHO, $SINK } dnat to 10.250.2.2
				  }
				}
			NFT
			TARGET[$s]=10.250.9.1 ;;
		haproxy)
			nsx "$m" ip addr add 10.250.9.1/32 dev lo
			mkdir -p "$WORK/haproxy"
			{
				printf 'global\n  maxconn 5000\n\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 120s\n  timeout server 120s\n'
				for port in $HTTP $ECHO $SINK; do
					printf '\nfrontend f%s\n  bind 10.250.9.1:%s\n  default_backend b%s\nbackend b%s\n  server s1 10.250.2.2:%s\n' \
						"$port" "$port" "$port" "$port" "$port"
				done
			} >"$WORK/haproxy/haproxy.cfg"
			setsid ip netns exec "$m" haproxy -db -f "$WORK/haproxy/haproxy.cfg" >"$WORK/haproxy/log" 2>&1 &
			PGIDS+=($!)
			disown $!
			sleep 0.5
			nsx "$m" ss -Hltn | grep -q "10.250.9.1:$HTTP" || { cat "$WORK/haproxy/log" >&2; return 1; }
			TARGET[$s]=10.250.9.1 ;;
		esac ;;
	ftnet-N*)
		# ftnet-N<k>, ftnet-N<k>-poll: the router busy-polls 100 µs after each packet,
		# ftnet-N<k>-vote: output voting (vote = "majority"),
		# (ftnet-N<k> itself runs the default output policy, "primary"),
		local n=${s#ftnet-N} extra=() l
		l="fb${TAG}n"
		if [[ $n == *-poll ]]; then n=${n%-poll} extra=(--busy-poll-us 100) l="fb${TAG}q"; fi
		if [[ $n == *-vote ]]; then n=${n%-vote} extra=(--vote majority) l="fb${TAG}v"; fi
		# ftnet-N<k>-fastest: output policy "fastest" (first copy of each byte wins)
		if [[ $n == *-fastest ]]; then n=${n%-fastest} extra=(--output fastest) l="fb${TAG}f"; fi
		# ftnet-N<k>-log: the client acknowledged from the router's input log (ack = "log")
		if [[ $n == *-log ]]; then n=${n%-log} extra=(--ack log) l="fb${TAG}l"; fi
		[[ $n =~ ^[1-9][0-9]?$ ]] || { echo "unknown setup $s" >&2; return 1; }
		l="$l$n"
		lab_up "$l" "$n" "${extra[@]}" || return 1
		LABNAME[$s]=$l TARGET[$s]=198.19.0.1 ;;
	*) echo "unknown setup $s" >&2; return 1 ;;
	esac
}

lab_up() { # lab_up NAME N [extra lab-up options...]
	LABS+=("$1")
	timeout 120 "$FTNET" lab up --name "$1" --replicas "$2" --port $HTTP --port $ECHO --port $SINK \
		--server "$SERVER_CMD" "${@:3}" >"$WORK/lab-$1.log" 2>&1 || { cat "$WORK/lab-$1.log" >&2; return 1; }
	"$FTNET" lab exec --name "$1" client -- sysctl -qw net.ipv4.tcp_tw_reuse=1 net.ipv4.ip_local_port_range="1024 65000"
}
lab_down() { timeout 60 "$FTNET" lab down --name "$1" >/dev/null 2>&1; }

# in_client SETUP CMD... — run CMD in SETUP's client namespace, bounded by 300 s.
in_client() {
	local s=$1; shift
	if [[ -n ${LABNAME[$s]:-} ]]; then
		timeout 300 "$FTNET" lab exec --name "${LABNAME[$s]}" client -- "$@"
	else
		timeout 300 ip netns exec "${CLIENT_NS[$s]}" "$@"
	fi
}
# record SETUP FIGURE REP JSON
# (JSON = the output of a client; its last line that is a JSON object, else the output is the error)
record() {
	python3 -c '
import json, sys
d = None
for line in reversed(sys.argv[4].splitlines()):
    if line.strip().startswith("{"):
        try:
            d = json.loads(line); break
        except ValueError:
            pass
if d is None:
    d = {"ok": False, "error": sys.argv[4][-300:]}
print(json.dumps({"setup": sys.argv[1], "figure": sys.argv[2], "rep": int(sys.argv[3]), "data": d}))' "$@" >>"$RAW"
}
nb() { local s=$1; shift; in_client "$s" python3 "$BENCH/netbench.py" "$@" 2>&1 | tail -n 5; }

measure() { # measure SETUP REP
	local s=$1 r=$2 h=${TARGET[$1]} out
	out=$(nb "$s" rr --host "$h" --port $ECHO --count $RR_COUNT --warmup 500); record "$s" rr "$r" "$out"
	out=$(nb "$s" cps --host "$h" --port $ECHO --seconds $CPS_SECONDS); record "$s" cps "$r" "$out"
	out=$(nb "$s" dl --url "http://$h:$HTTP/small.bin" --streams 1 --expect $((SMALL_MB << 20))); record "$s" dl-small-1 "$r" "$out"
	out=$(nb "$s" dl --url "http://$h:$HTTP/small.bin" --streams 4 --expect $((SMALL_MB << 20))); record "$s" dl-small-4 "$r" "$out"
	out=$(nb "$s" dl --url "http://$h:$HTTP/big.bin" --streams 1 --expect $((BIG_MB << 20))); record "$s" dl-big-1 "$r" "$out"
	out=$(nb "$s" dl --url "http://$h:$HTTP/big.bin" --streams 4 --expect $((BIG_MB << 20))); record "$s" dl-big-4 "$r" "$out"
	out=$(nb "$s" up --host "$h" --port $SINK --mb $UP_MB); record "$s" up-1 "$r" "$out"
	say "  $s rep $r: $(tail -n 7 "$RAW" | python3 -c '
import json,sys
for l in sys.stdin:
    d=json.loads(l); x=d["data"]
    v=x.get("mean_us") or x.get("conn_per_s") or x.get("gbit_s") or ("ERR "+str(x.get("error") or x.get("errors"))[:80])
    print("%s=%s" % (d["figure"], v), end=" ")')"
}

# ---------------------------------------------------------------- main measurements
T0=$(now_ms)
UP=()
for s in $SETUPS; do
	if setup_up "$s"; then UP+=("$s"); say "setup $s up (target ${TARGET[$s]})"; else say "setup $s FAILED to come up; skipped"; fi
done
((${#UP[@]})) || { say "no setup came up"; exit 1; }
# Warm-up: page cache and paths, untimed.
for s in "${UP[@]}"; do nb "$s" dl --url "http://${TARGET[$s]}:$HTTP/big.bin" --streams 1 >/dev/null; done
# Repetitions interleaved across setups, so slow drift of the noisy machine hits all alike.
for ((r = 1; r <= REPS; r++)); do
	for s in "${UP[@]}"; do measure "$s" "$r"; done
done
for s in "${UP[@]}"; do [[ -n ${LABNAME[$s]:-} ]] && lab_down "${LABNAME[$s]}"; done

# ---------------------------------------------------------------- router memory per idle connection
# ftnet only, a fresh lab each (a used lab's table already holds thousands of closed connections):
# IDLE_CONNS connections held open through the echo service, the router's RSS sampled on the way.
for s in "${UP[@]}"; do
	[[ $s =~ ^ftnet-N[0-9]+$ ]] || continue
	n=${s#ftnet-N} l="fb${TAG}m${s#ftnet-N}"
	lab_up "$l" "$n" || { record "$s" mem-idle 1 "lab up failed"; lab_down "$l"; continue; }
	LABNAME[mem]=$l TARGET[mem]=198.19.0.1
	rpid=$(cat "/run/ftnet/lab/$l/router.pid" 2>/dev/null)
	out=$(nb mem idle --host 198.19.0.1 --port $ECHO --conns $IDLE_CONNS --rss-pid "${rpid:-0}" --hold 5)
	record "$s" mem-idle 1 "$out"
	say "  $s mem-idle: $(echo "$out" | tail -n 1 | cut -c1-240)"
	lab_down "$l"
	unset 'LABNAME[mem]'
done

# ---------------------------------------------------------------- crashed rows (fresh lab each)
# big_time N — median wall time of the no-fault 1-stream big download through ftnet-N in this run.
big_time() {
	python3 - "$RAW" "$1" <<-'PY'
		import json, sys, statistics
		v = [d["data"]["wall_s"] for d in map(json.loads, open(sys.argv[1]))
		     if d["setup"] == "ftnet-N" + sys.argv[2] and d["figure"] == "dl-big-1" and d["data"].get("ok")]
		print(statistics.median(v) if v else 2.0)
	PY
}
crash_row() { # crash_row N REP KIND(dl-kill|stall-kill|stall-cut)
	local n=$1 r=$2 kind=$3 l="fb${TAG}c${1}" s="ftnet-N$1" out t fault frc pid
	local victim=$((($2 - 1) % $1 + 1))
	lab_up "$l" "$n" || { record "$s" "$kind" "$r" "lab up failed"; lab_down "$l"; return; }
	LABNAME[crash]=$l
	fault=${kind#*-}
	if [[ $kind == dl-kill ]]; then
		t=$(big_time "$n")
		# fault at ~40 % of the transfer: 40 % of this run's fault-free median after curl started
		# (minus ~20 ms for the kill command itself); the actual point is measured and reported.
		local delay; delay=$(python3 -c "print(max(0.0, $t * 0.4 - 0.02))")
		rm -f "$WORK/started"
		in_client crash python3 "$BENCH/netbench.py" dl --url "http://198.19.0.1:$HTTP/big.bin" --streams 1 \
			--expect $((BIG_MB << 20)) --started-file "$WORK/started" >"$WORK/crash.out" 2>&1 &
		pid=$!
		for ((k = 0; k < 1000; k++)); do [[ -s $WORK/started ]] && break; sleep 0.005; done
		sleep "$delay"
	else
		in_client crash python3 "$REPO/tests/e2e/stallmeter.py" --host 198.19.0.1 --port $ECHO --chunk 4096 \
			--interval-ms 1 --duration 4 --warmup 0.5 >"$WORK/crash.out" 2>"$WORK/crash.err" &
		pid=$!
		sleep 1.5
	fi
	local fe; fe=$(now_ms)
	frc=0
	timeout 30 "$FTNET" lab "$fault" --name "$l" "$victim" >/dev/null 2>&1 || frc=$?
	wait "$pid"
	out=$(python3 - "$WORK/crash.out" "$fe" "$victim" "$frc" "${t:-0}" <<-'PY'
		import json, sys
		try:
		    r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
		except Exception as e:
		    r = {"ok": False, "error": "no result: %s" % open(sys.argv[1]).read()[:300]}
		fe = float(sys.argv[2]) / 1000
		r["fault_epoch"] = fe
		r["victim"] = int(sys.argv[3])
		r["fault_rc"] = int(sys.argv[4])
		if "start_epoch" in r and r.get("wall_s"):
		    # where in the transfer the fault landed (0 = start, 100 = end; wall time includes curl start-up)
		    r["fault_at_pct"] = round((fe - r["start_epoch"]) * 100 / r["wall_s"], 1)
		    # ... and the share of the bytes delivered by then, assuming the fault-free rate until the fault
		    if float(sys.argv[5]) > 0:
		        r["fault_at_bytes_pct"] = round(min(100.0, (fe - r["start_epoch"]) * 100 / float(sys.argv[5])), 1)
		if "top_gaps" in r:
		    # the stall the fault caused: the largest gap open at the fault or starting within 2 s after
		    near = [g for g, s in r["top_gaps"] if s <= fe + 2.0 and s + g / 1000 >= fe]
		    r["fault_gap_ms"] = max(near) if near else None
		print(json.dumps(r))
	PY
	)
	record "$s" "$kind" "$r" "$out"
	say "  $s $kind rep $r victim r$victim: $(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print({k: d.get(k) for k in ("ok","gbit_s","fault_at_pct","fault_at_bytes_pct","fault_gap_ms","max_gap_ms","error","errors") if k in d})')"
	lab_down "$l"
	unset 'LABNAME[crash]'
}
if ((CRASH)); then
	for n in 2 3; do
		[[ " ${UP[*]} " == *" ftnet-N$n "* ]] || continue
		for ((r = 1; r <= CRASH_REPS; r++)); do
			for kind in dl-kill stall-kill stall-cut; do crash_row "$n" "$r" "$kind"; done
		done
	done
fi
RUNTIME_S=$((($(now_ms) - T0) / 1000))

# ---------------------------------------------------------------- report
mkdir -p "$OUT"
SHA=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo nogit)
base="$OUT/$(date -u +%Y%m%d-%H%M)-$SHA"
python3 "$BENCH/report.py" --raw "$RAW" --out "$base" --setups "${UP[*]}" --reps "$REPS" --quick "$QUICK" \
	--runtime "$RUNTIME_S" --sha "$SHA" --big-mb "$BIG_MB" --small-mb "$SMALL_MB" --up-mb "$UP_MB" \
	--rr-count "$RR_COUNT" --cps-seconds "$CPS_SECONDS" || exit 1
say "results: $base.md $base.json $base.svg (runtime ${RUNTIME_S} s)"
cat "$base.md"
