#!/usr/bin/env bash
# Redis closes clients that send malformed requests, and the input order survives it (issue 13,
# item 5). Topology: the lab's client ns -> router (ftnet, sequencer) -> N Redis replicas, each
# under the determinism shim (`lab up --shim`: `ftnet run` + agent).
# 1. DESYNC clients (desync.py, in parallel) each send a malformed request ("*1\r\n$abc\r\n":
#    invalid bulk length) and keep writing 512-byte chunks of junk for up to 2 s. Every Redis
#    answers "-ERR Protocol error" and closes the connection; its kernel resets it as soon as
#    more input is there (unread data at close, or data after it), each replica at its own time,
#    while the client is still sending. The router numbers the bytes that arrive after the first
#    replica's reset; before the fix those numbers went only to the replicas still in the
#    connection, and the shim of the one that reset first found a hole in the order ("hole in the
#    router's order ... input now follows the kernel's order") and its server diverged.
# 2. redis-benchmark -c 50 -n APPENDS: APPEND on 4 keys (the final values depend on the order).
# Pass: every desync client saw the protocol error and the connection end; the benchmark exits 0
# without errors; every replica's DEBUG DIGEST equal and not empty; no shim logged a hole or fell
# back to the kernel's order; no replica was marked down.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init redis-desync "$@"
[[ $FAULT == none ]] || die "redis-desync runs without a fault"

REDIS_PORT=6379
DESYNC=${FTNET_E2E_DESYNC:-3}
APPENDS=${FTNET_E2E_APPENDS:-600}
lab_up --port "$REDIS_PORT" --shim

cat >"$T/desync.py" <<'EOF'
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
s.sendall(b"*1\r\n$abc\r\n")
junk, sent, end = b"x" * 512, 0, time.monotonic() + 2
s.settimeout(0.005)
reply, closed = b"", False
try:
    while time.monotonic() < end and not closed:
        try:
            s.send(junk)
            sent += len(junk)
        except BlockingIOError:
            pass
        try:
            b = s.recv(4096)
            if not b:
                closed = True
            reply += b
        except socket.timeout:
            pass
except (ConnectionResetError, BrokenPipeError):
    closed = True
print(f"sent {sent} bytes after the malformed request; reply {reply[:60]!r}; ended {closed}")
sys.exit(0 if closed and b"Protocol error" in reply else 1)
EOF

pids=()
for ((i = 1; i <= DESYNC; i++)); do
	timeout 20 "$FTNET" lab exec --name "$LAB" client -- python3 "$T/desync.py" "$VIP" "$REDIS_PORT" \
		>"$T/desync$i.out" 2>&1 &
	pids+=($!)
done
for ((i = 1; i <= DESYNC; i++)); do
	rc=0
	wait "${pids[$((i - 1))]}" || rc=$?
	say "desync client $i: $(cat "$T/desync$i.out")"
	check_eq "desync client $i saw the protocol error and the connection end" 0 "$rc"
done

rc=0
redis_bench "$T/append.out" -r 4 -n "$APPENDS" -q APPEND 'k:__rand_int__' 'v:__rand_int__' || rc=$?
say "APPEND: $(rps "$T/append.out")"
check_eq "redis-benchmark (APPEND) exit status" 0 "$rc"
check "no error in the APPEND output" no_errors "$T/append.out"

all=$(seq 1 "$N")
# shellcheck disable=SC2086
settle $all
# shellcheck disable=SC2086
same_digests "after the desync clients and $APPENDS APPENDs" $all
for r in $all; do
	log=$(replica_dir "$r")/server.log
	check "r$r server log shows the shim ordering its input" grep -q "input follows the router's order" "$log"
	check "r$r shim found no hole in the router's order" bash -c "! grep -q \"hole in the router's order\" '$log'"
	check "r$r shim never fell back to the kernel's order" bash -c "! grep -q 'replicas may diverge' '$log'"
done
status=$(timeout 20 "$FTNET" lab status --name "$LAB" --json 2>&1 || true)
echo "$status" >"$T/status.json"
check "no replica marked down" bash -c "! grep -q '\"alive\": *false' '$T/status.json'"
e2e_finish
