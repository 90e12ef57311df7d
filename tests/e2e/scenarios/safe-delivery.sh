#!/usr/bin/env bash
# Safe delivery (`delivery = "safe"`, AR-TCP §4.1; MISSION.md mechanism 6): Redis × 3 under the shim,
# the router dropping every DROP-th data segment to r3 (its test hook), so r3 lags. CONNS client
# connections each send one `SET k<i> v<i>`; half of them wait for the reply and close, the other
# half reset the connection at once (SO_LINGER 0), while r3 may still lack the request.
# Pass (safe): no replica taken out; every replica's DEBUG DIGEST equal — a request the client
# reset before every replica held it was run by no server, and one every replica held by all.
# FAULT=none also runs the control, the same load best effort: the reset requests r1 and r2 ran
# and r3 never got leave r3 behind, and it is taken out of the service (`input_lost`).
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init safe-delivery "$@"
[[ $N == 3 ]] || die "safe-delivery runs with three replicas"
[[ $FAULT == none ]] || die "safe-delivery runs with FAULT=none"

REDIS_PORT=6379
CONNS=$(quick 200 300)
DROP=7
LOG=/run/ftnet/lab/$LAB/router.log
status_json() { lab status --name "$LAB" --json; }
alive() { status_json | python3 -c 'import json,sys; print(sum(1 for r in json.load(sys.stdin)["status"]["services"][0]["replicas"] if r["alive"]))'; }

cat >"$T/resets.py" <<'PY'
import socket, struct, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.create_connection((host, port), timeout=10)
s.sendall(b"SET base x\r\n")
assert s.recv(64) == b"+OK\r\n"
s.close()
replied = reset = 0
for i in range(n):
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(f"SET k{i} v{i}\r\n".encode())
    if i % 2 == 0:
        got = s.recv(64)
        assert got == b"+OK\r\n", got
        s.close()
        replied += 1
    else:
        # Reset at once: the request may not have reached every replica.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        reset += 1
print(f"{replied} replied, {reset} reset")
PY
load() {
	timeout 120 "$FTNET" lab exec --name "$LAB" client -- python3 "$T/resets.py" "$VIP" "$REDIS_PORT" "$CONNS" >"$T/$1.out" 2>&1
}

lab_up --port "$REDIS_PORT" --shim --delivery safe --fault-drop "$N:$DROP" --failure-ms 3000
rc=0
load safe || rc=$?
say "safe: $(tail -1 "$T/safe.out")"
check_eq "safe: the client's exit status" 0 "$rc"
sleep 3.5 # past the failure-detection time: a replica left behind would be out by now
check "safe: no replica taken out" bash -c "! grep -q 'evicted' '$LOG'"
check_eq "safe: replicas alive" 3 "$(alive)"
settle 1 2 3
same_digests "safe" 1 2 3
for r in 1 2 3; do say "safe: r$r holds $(redis_at "$r" DBSIZE | tr -d '\r') keys"; done
check "the router logged its dropped segments to r3" grep -q "fault" "$LOG"

# The control: best effort.
timeout 120 "$FTNET" lab down --name "$LAB" >/dev/null 2>&1
lab_up --port "$REDIS_PORT" --shim --fault-drop "$N:$DROP" --failure-ms 3000
load control || true
say "best effort: $(tail -1 "$T/control.out")"
wait_for 10 grep -q "evicted (input_lost)" "$LOG" || true
line=$(grep -m1 "input_lost" "$LOG" || true)
say "best effort: ${line:-<no replica taken out>}"
check "best effort: the lagging replica is taken out (its server lacks requests the others ran)" grep -q "replica $(replica_ip 3) evicted (input_lost)" "$LOG"
e2e_finish
