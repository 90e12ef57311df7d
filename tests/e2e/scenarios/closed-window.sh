#!/usr/bin/env bash
# A replica behind the others while the client's window is closed: three nginx replicas under the
# shim (their `Date:` from the router's clock, so a late reply is the same reply). r3's nginx is
# stopped (SIGSTOP: its kernel still takes the request) when one client, its receive buffer fixed
# at 64 KiB, asks for a file and then reads nothing for 3 s: r1 and r2 fill its window and it
# closes. 300 ms in, r3's nginx runs again and writes its reply. The bytes it is behind by the
# client already holds; the router acknowledges each replica only what it sent, and the window it
# gives r3 must reach the client's edge, not the client's (zero) window past r3's own position —
# else r3 cannot send them until the client reads, its output stands still while the others'
# moved, and after 1 s it is taken out as `stalled`, alive and correct (a 64 KiB GET in a storm
# of them, heal-nginx, lost a replica so). Pass: the body intact, all three replicas alive, none
# taken out of the connection.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
export FTNET_E2E_SHIM=1
e2e_init closed-window "$@"
[[ $N == 3 ]] || die "closed-window runs with three replicas"
[[ $FAULT == none ]] || die "closed-window runs with FAULT=none"

PORT=8080
big=$(e2e_data rand-8m 8)
LOG=/run/ftnet/lab/$LAB/router.log

lab_up --port "$PORT" --server "$(nginx_server_cmd "$big")"
pids=$(replica_procs 3 nginx)
[[ -n $pids ]] || die "no nginx in r3"

cat >"$T/reader.py" <<'EOF'
# A client that asks for /big.bin and reads nothing for HOLD seconds (its window closes), then
# everything; prints the status line, the body's length and its SHA-256.
import hashlib, socket, sys, time
host, port, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
s.settimeout(30)
s.connect((host, port))
s.sendall(f"GET /big.bin HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
time.sleep(hold)
data = bytearray()
deadline = time.time() + 60
while time.time() < deadline:
    b = s.recv(1 << 20)
    if not b:
        break
    data += b
head, _, body = bytes(data).partition(b"\r\n\r\n")
print(head.split(b"\r\n")[0].decode(errors="replace"), len(body), hashlib.sha256(body).hexdigest())
EOF

# shellcheck disable=SC2086
kill -STOP $pids
rc=0
timeout 90 "$FTNET" lab exec --name "$LAB" client -- python3 "$T/reader.py" "$VIP" "$PORT" 3 \
	>"$T/reader.out" 2>"$T/reader.err" &
reader=$!
sleep 0.3
# shellcheck disable=SC2086
kill -CONT $pids
wait "$reader" || rc=$?
say "client: $(cat "$T/reader.out")"
[[ -s $T/reader.err ]] && say "client stderr: $(head -c 2000 "$T/reader.err")"
grep -h "evicted" "$LOG" | head -3 | sed 's/^/    /' || true
check_eq "client exit status" 0 "$rc"
check_eq "status, length and sha256 of the body" "HTTP/1.1 200 OK $(stat -c %s "$big") $(sha "$big")" "$(cat "$T/reader.out")"
check "no replica taken out of the connection" bash -c "! grep -q 'evicted' '$LOG'"
check_eq "replicas alive" 3 "$(lab_alive)"
e2e_finish
