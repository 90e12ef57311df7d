#!/usr/bin/env bash
# (e) A persistent connection that is idle when the fault hits, then used again (connection
# pools, HTTP keep-alive). A replica killed while idle closes its socket with a bare FIN; the
# router must evict that replica, not forward the FIN or blame the healthy ones.
# Pass: every INCR on the old connection answers the next counter value, a new connection still
# works, and every survivor holds the final count.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init idle "$@"

REDIS_PORT=6379
AFTER=5
lab_up --port "$REDIS_PORT"

ready=$T/ready
rc=0
timeout 60 "$FTNET" lab exec --name "$LAB" client -- \
	python3 "$E2E_DIR/idleclient.py" --host "$VIP" --port "$REDIS_PORT" --ready-file "$ready" \
	--idle 2 --after "$AFTER" >"$T/idle.json" 2>"$T/idle.err" &
client=$!
if [[ $FAULT != none ]]; then
	wait_for 20 test -e "$ready" || die "client never became ready: $(cat "$T/idle.err")"
	sleep 0.5
	t=$(now_ms)
	frc=0
	"$FTNET" lab "$FAULT" --name "$LAB" "$VICTIM" >"$T/fault.out" 2>&1 || frc=$?
	echo "fault=$FAULT victim=r$VICTIM while idle rc=$frc epoch_ms=$t" >"$T/fault.txt"
	say "FAULT injected: lab $FAULT r$VICTIM while the connection is idle (rc=$frc)"
	check_eq "lab $FAULT exit status" 0 "$frc"
fi
wait "$client" || rc=$?
say "client: $(cat "$T/idle.json" 2>/dev/null) $(head -c 1000 "$T/idle.err")"
check_eq "idle connection survived, replies in order (client exit status)" 0 "$rc"
total=$((AFTER + 1))
check_eq "a new connection through the VIP works" PONG \
	"$(timeout 20 "$FTNET" lab exec --name "$LAB" client -- redis-cli -h "$VIP" -p "$REDIS_PORT" PING 2>&1)"
for r in "${SURVIVORS[@]}"; do
	wait_for 5 test "$(redis_at "$r" GET idle:counter)" = "$total" || true
	check_eq "r$r counter" "$total" "$(redis_at "$r" GET idle:counter)"
done
e2e_finish
