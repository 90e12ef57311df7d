#!/usr/bin/env bash
# (b2) nginx WebDAV upload: PUT 100 MB through the VIP with curl -T.
# Pass: curl exit 0, HTTP 201/204, and the stored file on every surviving replica has the right
# sha256; the fault (if any) landed mid-upload.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init nginx-put "$@"

PORT=8080
MB=$(quick 20 100)
TOTAL=$((MB * 1048576))
file=$(e2e_data "rand-${MB}m" "$MB")

lab_up --port "$PORT" --server "$(nginx_server_cmd "")"

# Upload progress as seen by the first survivor: nginx spools the body into tmp/body, then
# renames it to www/upload/x.bin.
watch_dir=$(replica_dir "${SURVIVORS[0]}")
progress() {
	# (find fails while www/upload does not exist yet; that must not zero the sum under pipefail)
	{ find "$watch_dir/tmp/body" "$watch_dir/www/upload" -type f -printf '%s\n' 2>/dev/null || true; } |
		awk '{ s += $1 } END { print s + 0 }'
}
fault_when $((TOTAL * $(random_pct 10 60) / 100)) "$TOTAL" progress bytes

limit=()
((RATE_MBPS > 0)) && limit=(--limit-rate "${RATE_MBPS}M")
t0=$(now_ms)
rc=0
code=$(timeout 300 "$FTNET" lab exec --name "$LAB" client -- \
	curl -sS --max-time 280 "${limit[@]}" -T "$file" -o "$T/response.txt" -w '%{http_code}' \
	"http://$VIP:$PORT/upload/x.bin" 2>"$T/client.err") || rc=$?
dt=$(($(now_ms) - t0))
fault_done
say "PUT of $MB MiB took $dt ms ($((TOTAL * 8 / (dt > 0 ? dt : 1) / 1000)) Mbit/s)"
[[ -s $T/client.err ]] && say "client stderr: $(head -c 2000 "$T/client.err")"
check_eq "curl exit status" 0 "$rc"
check "HTTP status is 201 or 204 (got '$code')" test "$code" = 201 -o "$code" = 204
want=$(sha "$file")
for r in "${SURVIVORS[@]}"; do
	f=$(replica_dir "$r")/www/upload/x.bin
	if wait_for 15 test "$(stat -c %s "$f" 2>/dev/null)" = "$TOTAL"; then
		check_eq "r$r stored file sha256" "$want" "$(sha "$f")"
	else
		check "r$r has $f" false
	fi
done
e2e_finish
