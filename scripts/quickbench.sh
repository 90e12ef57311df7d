#!/usr/bin/env bash
# A rough throughput figure in one run: nginx serves a large file, curl fetches it
#   - through the VIP with N=1 and with N=3 replicas (the ftnet router's data path), and
#   - "direct": from the same replica's real IP on port+1, which is not a service port, so the
#     router's policy rules leave it alone and it is plain kernel forwarding through the router ns.
# Medians of 3 fetches each. Compare figures within one run only (the machine is noisy).
#
#   client ns ──veth── router ns (ftnet, VIP 198.19.0.1) ──veth── r1..rN (nginx :PORT and :PORT+1)
#
# Usage: ./scripts/quickbench.sh        (needs root; QUICKBENCH_MB=1024 sets the file size)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
# shellcheck source=scripts/deps.sh
source scripts/deps.sh
[[ $(id -u) == 0 ]] || { echo "quickbench.sh: needs root (network namespaces)" >&2; exit 1; }
MB=${QUICKBENCH_MB:-1024}
PORT=8080
DIRECT_PORT=$((PORT + 1))
VIP=198.19.0.1
R1=198.18.11.2

ftnet_install_deps
if [[ -z ${FTNET:-} ]]; then
	cargo build --release --locked
	FTNET=${CARGO_TARGET_DIR:-$REPO/target}/release/ftnet
fi

WORK=$(mkdir -p /run/ftnet-e2e && mktemp -d /run/ftnet-e2e/bench.XXXXXX)
LAB=
cleanup() {
	set +e
	[[ -n $LAB ]] && timeout 60 "$FTNET" lab down --name "$LAB" >/dev/null 2>&1
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Reuse the e2e helper that writes the per-replica nginx config (hard-linked big.bin, so every
# replica serves identical bytes and mtime; listen PORT and PORT+1).
E2E_TEST=quickbench
# shellcheck source=tests/e2e/lib.sh
source tests/e2e/lib.sh
echo "== generating a $MB MiB file"
big=$WORK/big.bin
head -c "$((MB * 1048576))" /dev/urandom >"$big"
server=$(nginx_server_cmd "$big" 1)

# fetch URL — prints bytes/s of one curl download, or "fail".
fetch() {
	local out
	if out=$(timeout 200 "$FTNET" lab exec --name "$LAB" client -- \
		curl -sS -f --max-time 180 -o /dev/null -w '%{speed_download} %{size_download}' "$1" 2>"$WORK/curl.err"); then
		read -r speed size <<<"$out"
		if [[ ${size%.*} == "$((MB * 1048576))" ]]; then echo "${speed%.*}"; return; fi
	fi
	echo "quickbench: fetch $1 failed: $(head -c 300 "$WORK/curl.err") ${out:-}" >&2
	echo fail
}
# median3 A B C (numbers or "fail") — the median, or "fail" if any run failed.
median3() {
	local v
	for v in "$@"; do [[ $v == fail ]] && { echo fail; return; }; done
	printf '%s\n' "$@" | sort -n | sed -n 2p
}
gbit() { [[ $1 == fail ]] && echo "fail" || awk -v b="$1" 'BEGIN { printf "%.2f", b * 8 / 1e9 }'; }
ratio() { [[ $1 == fail || $2 == fail || $2 == 0 ]] && echo "-" || awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

declare -A result
for n in 1 3; do
	LAB=$(printf 'qb%05d' $(($$ % 100000)))
	echo "== lab $LAB: N=$n replicas, nginx on :$PORT (VIP service) and :$DIRECT_PORT (direct)"
	timeout 180 "$FTNET" lab up --name "$LAB" --replicas "$n" --port "$PORT" --server "$server" >"$WORK/up.log" 2>&1 ||
		{ cat "$WORK/up.log" >&2; echo "quickbench: lab up failed" >&2; exit 1; }
	# Warm the page cache and the path once, untimed.
	fetch "http://$R1:$DIRECT_PORT/big.bin" >/dev/null
	for path in vip direct; do
		url="http://$VIP:$PORT/big.bin"
		[[ $path == direct ]] && url="http://$R1:$DIRECT_PORT/big.bin"
		runs=()
		for _ in 1 2 3; do runs+=("$(fetch "$url")"); done
		result[$path,$n]=$(median3 "${runs[@]}")
		echo "   $path N=$n: $(for r in "${runs[@]}"; do printf '%s ' "$(gbit "$r")"; done)Gbit/s"
	done
	timeout 60 "$FTNET" lab down --name "$LAB" >/dev/null 2>&1 || true
	LAB=
done

d1=${result[direct,1]} d3=${result[direct,3]}
echo
echo "quickbench: $MB MiB file over HTTP (nginx sendfile, curl), median of 3, $(date -u +%FT%TZ),"
echo "$(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(uname -r), $(nproc) cores"
printf '%-44s %10s %12s\n' "path" "Gbit/s" "vs direct"
printf '%-44s %10s %12s\n' "direct, kernel forwarding (N=1 lab)" "$(gbit "$d1")" "1.00"
printf '%-44s %10s %12s\n' "VIP through ftnet, N=1" "$(gbit "${result[vip,1]}")" "$(ratio "${result[vip,1]}" "$d1")"
printf '%-44s %10s %12s\n' "direct, kernel forwarding (N=3 lab)" "$(gbit "$d3")" "1.00"
printf '%-44s %10s %12s\n' "VIP through ftnet, N=3" "$(gbit "${result[vip,3]}")" "$(ratio "${result[vip,3]}" "$d3")"
printf '%-44s %10s %12s\n' "N=3 vs N=1 through ftnet" "" "$(ratio "${result[vip,3]}" "${result[vip,1]}")"
