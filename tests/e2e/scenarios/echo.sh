#!/usr/bin/env bash
# (a) socat echo service: 50 MB of random data round trip through the VIP.
# Pass: client exit 0, echoed bytes have the same sha256, the fault (if any) landed mid-transfer.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init echo "$@"

PORT=7000
MB=$(quick 10 50)
TOTAL=$((MB * 1048576))
in=$(e2e_data "rand-${MB}m" "$MB")
out=$T/echo.out
: >"$out"

# -t 60 on both ends: after one direction reaches EOF socat waits for the other instead of
# quitting after the default 0.5 s, which a failover stall could otherwise exceed.
lab_up --port "$PORT" --server "socat -t 60 TCP-LISTEN:{port},fork,reuseaddr EXEC:cat"

progress() { stat -c %s "$out"; }
fault_when $((TOTAL * $(random_pct 10 60) / 100)) "$TOTAL" progress bytes

t0=$(now_ms)
rc=0
python3 "$E2E_DIR/pace.py" "$RATE_MBPS" <"$in" |
	timeout 300 "$FTNET" lab exec --name "$LAB" client -- \
		socat -t 60 - "TCP:$VIP:$PORT" >"$out" 2>"$T/client.err" || rc=$?
dt=$(($(now_ms) - t0))
fault_done
say "round trip of $MB MiB took $dt ms ($((TOTAL * 2 * 8 / (dt > 0 ? dt : 1) / 1000)) Mbit/s both ways)"
[[ -s $T/client.err ]] && say "client stderr: $(head -c 2000 "$T/client.err")"
check_eq "client exit status" 0 "$rc"
check_eq "echoed byte count" "$TOTAL" "$(stat -c %s "$out")"
check_eq "echoed sha256" "$(sha "$in")" "$(sha "$out")"
e2e_finish
