#!/usr/bin/env bash
# (m) A server that closes and then resets: the client must learn at once, as without ftnet.
#
#  client (writeafterclose.py) ──veth── router ──veth── r1..rN (redis-server)
#
# The client sends a malformed request; Redis answers "Protocol error" and closes (FIN); the
# client acknowledges the FIN and keeps writing PING every 100 ms (a half-closed connection from
# its side). Every replica's kernel answers the first write with a RST (RFC 9293 §3.10.7.4).
# Pass: the client's writes fail within 1 s (directly against Redis: after 1-2 writes), the
# router logs no replica down, and a new connection still works.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init server-reset "$@"
[[ $FAULT == none ]] || die "server-reset runs without a fault"

REDIS_PORT=6379
lab_up --port "$REDIS_PORT"
rc=0
timeout 30 "$FTNET" lab exec --name "$LAB" client -- python3 "$E2E_DIR/writeafterclose.py" \
	--host "$VIP" --port "$REDIS_PORT" --seconds 5 >"$T/client.json" 2>"$T/client.err" || rc=$?
say "client: $(cat "$T/client.json") $(head -c 500 "$T/client.err")"
check "Redis answered with a protocol error" grep -q "Protocol error" "$T/client.json"
check "the client got the server's FIN before writing on" grep -q '"fin": true' "$T/client.json"
check_eq "the client learnt the connection is gone" 0 "$rc"
after=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["after_ms"])' "$T/client.json" 2>/dev/null || echo 99999)
check "within 1 s of its first write after the close (${after} ms)" test "$after" -le 1000
check "no replica declared down" bash -c "! grep -q 'declared down' /run/ftnet/lab/$LAB/router.log"
check_eq "a new connection works" PONG "$(timeout 10 "$FTNET" lab exec --name "$LAB" client -- redis-cli -h "$VIP" -p "$REDIS_PORT" PING)"
e2e_finish
