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

idle_client_start 2 "$AFTER"
idle_client_fault 0.5 "the connection is idle"
idle_client_finish "$AFTER" "idle connection survived, replies in order"
check_eq "a new connection through the VIP works" PONG \
	"$(timeout 20 "$FTNET" lab exec --name "$LAB" client -- redis-cli -h "$VIP" -p "$REDIS_PORT" PING 2>&1)"
e2e_finish
