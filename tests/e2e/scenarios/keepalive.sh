#!/usr/bin/env bash
# A client whose idle connection uses TCP keep-alive (database pools, Redis clients, SSH): its
# kernel sends a probe after 1 s idle, then one every second, and drops the connection after two
# unanswered ones. The replicas answer each probe, but their answers carry nothing new for the
# client; the router itself must answer it with the group's ACK. With a fault, a replica is
# killed (or cut) while the connection idles.
# Pass: the connection outlives 6 s idle (so at least 4 probes were sent and answered), every
# INCR on it answers the next counter value, and every survivor holds the final count.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init keepalive "$@"

REDIS_PORT=6379
AFTER=3
IDLE=6
lab_up --port "$REDIS_PORT"

idle_client_start "$IDLE" "$AFTER" --keepalive 2
idle_client_fault 2.5 "the connection idles on keep-alives"
idle_client_finish "$AFTER" "connection kept alive through ${IDLE} s idle, replies in order"
probes=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("keepalives_sent_while_idle", 0))' "$T/idle.json" 2>/dev/null || echo 0)
check "keep-alive probes sent while idle: $probes (at least 4)" test "$probes" -ge 4
e2e_finish
