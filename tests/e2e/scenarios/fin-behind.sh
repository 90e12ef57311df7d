#!/usr/bin/env bash
# The client closes while a replica is still behind on its reply: three nginx replicas under the
# shim (their `Date:` from the router's clock) with `vote = "majority"`. One client, its receive
# buffer fixed at 64 KiB, asks for a file on a keep-alive connection and reads nothing for 0.4 s, so
# every nginx is in the middle of writing its reply; 0.2 s in, r3's nginx is stopped (SIGSTOP).
# The client then reads the whole reply from r1 and r2 and closes, as curl does after its last reply. 0.2 s later (r3 stopped for less than the 1 s after which a replica
# whose output stands still is taken out)
# r3's nginx runs again. A server never sees its client close before the client got the bytes it
# had got when it closed; a replica behind the others would, and nginx gives a reply up when its
# client closes (status 499): r3 would close in the middle of the reply the client already holds,
# which the vote takes for a replica that diverged and takes out of the service (a FLAKY
# `vote-slow` lost its slowest replica so). The router gives a replica the client's FIN only once
# that replica sent what the client had when it closed. Pass: the body intact, all three replicas
# alive, none taken out of the connection, the connection closed on every replica, and r3's nginx
# logged the whole reply (status 200, every byte).
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
export FTNET_E2E_SHIM=1
e2e_init fin-behind "$@"
[[ $N == 3 ]] || die "fin-behind runs with three replicas"
[[ $FAULT == none ]] || die "fin-behind runs with FAULT=none"

PORT=8080
big=$(e2e_data rand-6m 6)
LOG=/run/ftnet/lab/$LAB/router.log

lab_up --port "$PORT" --vote majority --server "$(nginx_server_cmd "$big")"
pids=$(replica_procs 3 nginx)
[[ -n $pids ]] || die "no nginx in r3"

cat >"$T/reader.py" <<'EOF'
# Asks for /big.bin on a keep-alive connection, reads nothing for HOLD seconds, then the head and
# Content-Length bytes of body, and closes (as curl does after its last reply); prints the status
# line, the body's length and its SHA-256.
import hashlib, socket, sys, time
host, port, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
s.settimeout(30)
s.connect((host, port))
s.sendall(f"GET /big.bin HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
time.sleep(hold)
t = time.time()
data = bytearray()
want = None
while want is None or len(data) < want:
    b = s.recv(1 << 20)
    if not b:
        break
    data += b
    if want is None and b"\r\n\r\n" in data:
        head = bytes(data).split(b"\r\n\r\n", 1)[0]
        n = [l.split(b":", 1)[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
        want = len(head) + 4 + int(n[0])
s.close()
head, _, body = bytes(data).partition(b"\r\n\r\n")
print(head.split(b"\r\n")[0].decode(errors="replace"), len(body), hashlib.sha256(body).hexdigest())
print(f"read in {time.time() - t:.3f} s", file=sys.stderr)
EOF

rc=0
timeout 90 "$FTNET" lab exec --name "$LAB" client -- python3 "$T/reader.py" "$VIP" "$PORT" 0.4 \
	>"$T/reader.out" 2>"$T/reader.err" &
reader=$!
sleep 0.2
# shellcheck disable=SC2086
kill -STOP $pids
wait "$reader" || rc=$?
sleep 0.2
# shellcheck disable=SC2086
kill -CONT $pids
say "client: $(cat "$T/reader.out")"
[[ -s $T/reader.err ]] && say "client stderr: $(head -c 2000 "$T/reader.err")"
# r3 sends the rest of its reply and its FIN; the router then gives it the client's FIN, and the
# connection closes on every replica.
conn_state() { "$FTNET" lab status --name "$LAB" --json | python3 -c '
import json, sys
c = json.load(sys.stdin)["status"]["sample"]
print(" ".join([x["phase"] + ":" + ",".join(l["state"] for l in x["legs"]) for x in c]) or "none")'; }
closed="Closed:Closed,Closed,Closed"
state=none
for _ in $(seq 30); do
	state=$(conn_state)
	[[ $state == "$closed" ]] && break
	sleep 0.1
done
grep -h "evicted\|diverged" "$LOG" | head -3 | sed 's/^/    /' || true
r3log=$(replica_dir 3)/access.log
say "r3's nginx: $(tail -n 1 "$r3log" 2>/dev/null)"
check_eq "client exit status" 0 "$rc"
check_eq "status, length and sha256 of the body" "HTTP/1.1 200 OK $(stat -c %s "$big") $(sha "$big")" "$(cat "$T/reader.out")"
check "no replica taken out of the connection" bash -c "! grep -q 'evicted' '$LOG'"
check_eq "replicas alive" 3 "$(lab_alive)"
check_eq "the connection closed on every replica (phase:legs)" "$closed" "$state"
check "client FINs held back (fins_held)" test "$(lab_counter fins_held)" -ge 1
sent=$(awk '/"GET \/big.bin HTTP\/1.1" 200 /{print $10}' "$r3log" | tail -n 1)
check "r3's nginx sent the whole reply (status 200 and $(stat -c %s "$big") bytes of body: ${sent:-none})" test "${sent:-0}" -eq "$(stat -c %s "$big")"
e2e_finish
