#!/usr/bin/env bash
# Graceful stop (`ftnet drain`): the router takes no new connection, lets the open ones finish,
# and exits once the last one closed. Echo servers (socat) × 2; holdconn.py holds one connection
# through the VIP (echo, wait, echo). After `ftnet drain --deadline 30`:
# Pass: the CLI says it drains with 1 connection open; `ftnet status` shows DRAINING; a new
# connection gets no answer (its SYNs are dropped, counted as `draining`); the router keeps
# running while the held connection lives, and that connection's second echo comes back whole;
# once it closed the router exits within 5 s, logging that it drained.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init drain "$@"
[[ $FAULT == none ]] || die "drain runs without a fault"

PORT=7000
lab_up --port "$PORT" --server "socat -t 60 TCP-LISTEN:{port},fork,reuseaddr EXEC:cat"
DIR=/run/ftnet/lab/$LAB
LOG=$DIR/router.log
router_pid() { lab status --name "$LAB" --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])' 2>/dev/null; }
wait_for 5 router_pid >/dev/null || die "the router's status never showed its pid"
pid=$(router_pid)
say "router pid $pid"

timeout 60 "$FTNET" lab exec --name "$LAB" client -- python3 "$E2E_DIR/holdconn.py" --host "$VIP" \
	--port "$PORT" --ready-file "$T/held.ready" --release-file "$T/held.release" --max 40 \
	>"$T/held.json" 2>"$T/held.err" &
held=$!
wait_for 10 test -e "$T/held.ready" || die "the held connection never echoed: $(cat "$T/held.err")"

check "ftnet drain is accepted" bash -c "timeout 10 '$FTNET' drain --deadline 30 --socket '$DIR/router.sock' >'$T/drain.out' 2>&1"
say "ftnet drain: $(cat "$T/drain.out")"
check "it drains with the held connection open" grep -q "1 connection(s) open" "$T/drain.out"
check "the router logged the drain" wait_for 3 grep -q "draining (operator: .ftnet drain.)" "$LOG"
status_drains() { timeout 10 "$FTNET" lab status --name "$LAB" >"$T/status.txt" 2>&1 && grep -q "^DRAINING" "$T/status.txt"; }
check "status shows the drain" wait_for 3 status_drains
say "status: $(grep "^DRAINING" "$T/status.txt")"

# A new client: its SYNs are dropped, so it gets no connection.
rc=0
echo hello | timeout 5 "$FTNET" lab exec --name "$LAB" client -- \
	socat -T 2 - "TCP:$VIP:$PORT,connect-timeout=2" >"$T/new.out" 2>&1 || rc=$?
say "a new connection while draining: exit $rc, got '$(head -c 80 "$T/new.out" | tr '\n' ' ')'"
check "a new connection is not served while draining" test "$rc" -ne 0
drops() { lab status --name "$LAB" --json | python3 -c 'import json,sys; d=dict(json.load(sys.stdin)["status"]["drops"]); print(d.get("draining", 0))'; }
n=$(drops)
say "SYNs dropped as draining: $n"
check "its SYNs are counted as draining" test "$n" -gt 0
check "the router still runs while a connection is open" kill -0 "$pid"

touch "$T/held.release"
rc=0
wait "$held" || rc=$?
say "held connection: $(cat "$T/held.json")"
check "the held connection's second echo came back on it (exit $rc)" test "$rc" -eq 0
gone() { ! kill -0 "$pid" 2>/dev/null; }
t0=$(now_ms)
check "the router exits once the last connection closed" wait_for 5 gone
say "router gone $(($(now_ms) - t0)) ms after the client's last echo"
check "the router logged that it drained" grep -q "drained: the last connection closed" "$LOG"
e2e_finish
