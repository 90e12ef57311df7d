#!/usr/bin/env bash
# (b1) nginx static file: fetch a 100 MB file through the VIP with curl.
# Every replica serves the same bytes with the same mtime (one hard-linked file), so headers agree.
# Pass: curl exit 0, HTTP 200, sha256 equal, the fault (if any) landed mid-transfer.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init nginx-get "$@"

PORT=8080
MB=$(quick 20 100)
TOTAL=$((MB * 1048576))
big=$(e2e_data "rand-${MB}m" "$MB")
out=$T/big.bin
: >"$out"

lab_up --port "$PORT" --server "$(nginx_server_cmd "$big")"

progress() { stat -c %s "$out"; }
fault_when $((TOTAL * $(random_pct 10 60) / 100)) "$TOTAL" progress bytes

limit=()
((RATE_MBPS > 0)) && limit=(--limit-rate "${RATE_MBPS}M")
t0=$(now_ms)
rc=0
code=$(timeout 300 "$FTNET" lab exec --name "$LAB" client -- \
	curl -sS --max-time 280 "${limit[@]}" -o "$out" -w '%{http_code}' "http://$VIP:$PORT/big.bin" 2>"$T/client.err") || rc=$?
dt=$(($(now_ms) - t0))
fault_done
say "GET of $MB MiB took $dt ms ($((TOTAL * 8 / (dt > 0 ? dt : 1) / 1000)) Mbit/s)"
[[ -s $T/client.err ]] && say "client stderr: $(head -c 2000 "$T/client.err")"
check_eq "curl exit status" 0 "$rc"
check_eq "HTTP status" 200 "$code"
check_eq "downloaded sha256" "$(sha "$big")" "$(sha "$out")"
e2e_finish
