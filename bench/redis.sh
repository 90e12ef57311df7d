#!/usr/bin/env bash
# Redis throughput with the determinism shim and output voting, one run:
#   ftnet N=1, ftnet N=3, ftnet N=3 with every replica under `ftnet run` (sequencer + shim), the
#   same with safe delivery (delivery = "safe"), and the same with output voting (vote = "majority"),
# `redis-benchmark -c 50 -r 10000 -t set,incr,lpush,sadd,hset -n REQS` through the VIP, median of
# REPS repetitions per setup (interleaved). Writes bench/results/redis-<date>-<sha>.md and .json.
#
#   sudo bench/redis.sh [--reps N] [--requests N] [--out DIR]
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH/.." && pwd)
FTNET=${FTNET:-$REPO/target/release/ftnet}
REPS=3 REQS=50000 OUT=$BENCH/results
while (($#)); do
	case $1 in
	--reps) REPS=${2:?}; shift ;;
	--requests) REQS=${2:?}; shift ;;
	--out) OUT=${2:?}; shift ;;
	-h | --help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "redis.sh: unknown argument '$1'" >&2; exit 2 ;;
	esac
	shift
done
[[ $(id -u) == 0 ]] || { echo "redis.sh: needs root (network namespaces)" >&2; exit 1; }
command -v redis-benchmark >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server redis-tools >/dev/null
[[ -x $FTNET ]] || (cd "$REPO" && cargo build --release --locked)
TAG=$(($$ % 1000))
LABS=()
cleanup() { for l in "${LABS[@]}"; do timeout 60 "$FTNET" lab down --name "$l" >/dev/null 2>&1; done; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
declare -A ARGS=([n1]="--replicas 1" [n3]="--replicas 3" [n3shim]="--replicas 3 --shim" [n3safe]="--replicas 3 --shim --delivery safe" [n3vote]="--replicas 3 --shim --vote majority")
declare -A CODE=([n1]=1 [n3]=3 [n3shim]=s [n3safe]=d [n3vote]=v)
for s in n1 n3 n3shim n3safe n3vote; do
	l="rb${TAG}${CODE[$s]}"
	LABS+=("$l")
	# shellcheck disable=SC2086
	timeout 120 "$FTNET" lab up --name "$l" ${ARGS[$s]} >/dev/null
done
RAW=$(mktemp)
for ((r = 1; r <= REPS; r++)); do
	i=0
	for s in n1 n3 n3shim n3safe n3vote; do
		l=${LABS[$i]}; i=$((i + 1))
		out=$(timeout 900 "$FTNET" lab exec --name "$l" client -- redis-benchmark -h 198.19.0.1 -c 50 -r 10000 \
			-n "$REQS" -t set,incr,lpush,sadd,hset -q 2>&1 | tr '\r' '\n' | grep 'requests per second' || true)
		echo "$out" | awk -v s="$s" -v r="$r" '{ sub(":", "", $1); print s, r, $1, $2 }' >>"$RAW"
		echo "[$(date -u +%T)] $s rep $r: $(echo "$out" | awk '{ printf "%s %s  ", $1, $2 }')"
	done
done
mkdir -p "$OUT"
SHA=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo nogit)
base="$OUT/redis-$(date -u +%Y%m%d-%H%M)-$SHA"
python3 - "$RAW" "$base" "$REQS" "$REPS" <<'PY'
import json, statistics, sys, platform, os
raw, base, reqs, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = [l.split() for l in open(raw) if l.strip()]
setups = ["n1", "n3", "n3shim", "n3safe", "n3vote"]
names = {"n1": "ftnet N=1", "n3": "ftnet N=3", "n3shim": "ftnet N=3, sequencer + shim", "n3safe": "ftnet N=3, sequencer + shim + safe delivery", "n3vote": "ftnet N=3, sequencer + shim + voting"}
tests = []
for s, r, t, v in rows:
    if t not in tests:
        tests.append(t)
med = {(s, t): statistics.median([float(v) for s2, r, t2, v in rows if s2 == s and t2 == t] or [0]) for s in setups for t in tests}
doc = {"requests_per_test": reqs, "reps": reps, "clients": 50, "medians": {f"{s}/{t}": med[(s, t)] for s in setups for t in tests}, "raw": rows,
       "machine": {"nproc": os.cpu_count(), "kernel": platform.release()}}
json.dump(doc, open(base + ".json", "w"), indent=1)
L = [f"# Redis through ftnet, with and without the determinism shim, safe delivery and output voting — commit {os.path.basename(base)}", "",
     f"`redis-benchmark -c 50 -r 10000 -n {reqs} -t set,incr,lpush,sadd,hset` through the VIP; requests/s, median of {reps} (interleaved). "
     f"{os.cpu_count()} cores, Linux {platform.release()}; every replica and the router share them.", "",
     "| setup | " + " | ".join(tests) + " | × N=3 without shim |", "|---|" + "---:|" * (len(tests) + 1)]
for s in setups:
    ratio = statistics.mean([med[(s, t)] / med[("n3", t)] for t in tests if med[("n3", t)]])
    L.append(f"| {names[s]} | " + " | ".join(f"{med[(s, t)]:.0f}" for t in tests) + f" | {ratio:.2f} |")
open(base + ".md", "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY
rm -f "$RAW"
echo "results: $base.md $base.json"
