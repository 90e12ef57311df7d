#!/usr/bin/env bash
# Reverse-path check (issue 13, item 3): a client forging a replica's source address must not
# be taken for that replica. From the client namespace, with raw IP packets built by spoof.py
# (handed to the client's link through a packet socket, so that one addressed to the client
# itself leaves it as a replica's would arrive):
#   (i)   a RST|ACK from r1's address answering a SYN the client itself just sent (r1 "refusing"
#         a connection during its handshake);
#   (ii)  an ICMP host unreachable from r2's address quoting the client's own live connection
#         to r2 (r2's host "unreachable");
#   (iii) a UDP datagram from r1's address to r2 (a spoofed packet forwarded to a replica).
# Pass: every replica still alive in `ftnet status --json`, the held connection intact, a fresh
# connection served by all three replicas, nothing from (iii) reaches r2, and a replica's own
# traffic through the router (r1 -> client, UDP) still flows, and ICMP from a replica's interface
# still reaches the router.
#
#   client 198.18.1.2 ──veth── router (VIP 198.19.0.1) ──veth── r1 198.18.11.2
#   spoof.py forges           rules: from rN iif <rN's veth>    ── r2 198.18.12.2
#   r1/r2 as source           ..., else blackhole               ── r3 198.18.13.2
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init spoof "$@"
((N == 3)) || die "spoof runs with 3 replicas"

PORT=7000
CLIENT=198.18.1.2
lab_up --port "$PORT" --server "socat -t 60 TCP-LISTEN:{port},fork,reuseaddr EXEC:cat"
status_json() { lab status --name "$LAB" --json; }
alive_list() { status_json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join("%s=%s" % (r["addr"], r["alive"]) for r in d["status"]["services"][0]["replicas"]))'; }
all_alive() { local l; l=$(alive_list); [[ $(grep -o '=True' <<<"$l" | wc -l) == 3 ]]; }
conns_list() { status_json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join(str(r["connections"]) for r in d["status"]["services"][0]["replicas"]))'; }
check "all replicas alive after lab up ($(alive_list))" all_alive

# A connection the client holds open through the attacks (ICMP (ii) quotes it).
timeout 40 "$FTNET" lab exec --name "$LAB" client -- python3 "$E2E_DIR/holdconn.py" --host "$VIP" \
	--port "$PORT" --ready-file "$T/held.port" --release-file "$T/held.release" --max 30 \
	>"$T/held.json" 2>"$T/held.err" &
HELD_PID=$!
wait_for 10 test -s "$T/held.port" || die "held connection never came up: $(cat "$T/held.err")"
cport=$(cat "$T/held.port")
say "client holds a connection from port $cport"

# (i) RST from r1 during the client's own handshakes.
in_ns client python3 "$E2E_DIR/spoof.py" rst --client "$CLIENT" --vip "$VIP" --port "$PORT" \
	--replica "$(replica_ip 1)" --tries 3 >"$T/rst.out" 2>&1 || die "spoof.py rst failed: $(cat "$T/rst.out")"
say "sent: $(tr '\n' ';' <"$T/rst.out")"
# (ii) ICMP host unreachable from r2 about the held connection.
in_ns client python3 "$E2E_DIR/spoof.py" icmp --client "$CLIENT" --replica "$(replica_ip 2)" \
	--port "$PORT" --cport "$cport" --seq 12345 >"$T/icmp.out" 2>&1 || die "spoof.py icmp failed: $(cat "$T/icmp.out")"
say "sent: $(tr '\n' ';' <"$T/icmp.out")"
# (iii) UDP from r1's address to r2, with a receiver on r2.
timeout 5 "$FTNET" lab exec --name "$LAB" r2 -- python3 -c '
import socket,sys
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(("0.0.0.0",9999)); s.settimeout(2)
open(sys.argv[1],"w").close()
try: print(s.recvfrom(100))
except socket.timeout: print("nothing")' "$T/udp.ready" >"$T/udp-r2.out" 2>&1 &
UDP_PID=$!
wait_for 5 test -e "$T/udp.ready" || true
in_ns client python3 "$E2E_DIR/spoof.py" udp --src "$(replica_ip 1)" --dst "$(replica_ip 2)" --port 9999 >/dev/null
wait "$UDP_PID" || true
check_eq "a datagram with r1's address from the client side is not forwarded to r2" nothing "$(cat "$T/udp-r2.out")"
# A replica's own traffic through the router still flows (r1 -> client, UDP).
timeout 5 "$FTNET" lab exec --name "$LAB" client -- python3 -c '
import socket,sys
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(("0.0.0.0",9998)); s.settimeout(2)
open(sys.argv[1],"w").close()
try: print(s.recvfrom(100)[0].decode())
except socket.timeout: print("nothing")' "$T/udp2.ready" >"$T/udp-client.out" 2>&1 &
UDP_PID=$!
wait_for 5 test -e "$T/udp2.ready" || true
in_ns r1 python3 -c 'import socket; socket.socket(socket.AF_INET,socket.SOCK_DGRAM).sendto(b"from-r1",("198.18.1.2",9998))'
wait "$UDP_PID" || true
check_eq "r1's own datagram to the client is routed as before" from-r1 "$(cat "$T/udp-client.out")"

# ICMP that arrives on a replica's interface still reaches the router (r3 pings the client: the
# core counts the echo request as an ICMP it ignores).
icmp_ignored() { status_json | python3 -c 'import json,sys; print(dict(json.load(sys.stdin)["status"]["drops"])["icmp_ignored"])'; }
before=$(icmp_ignored)
in_ns r3 python3 -c '
import socket, struct
b = struct.pack("!BBHHH", 8, 0, 0, 1, 1) + b"ftnet!"
s = sum(struct.unpack("!7H", b))
s = (s & 0xFFFF) + (s >> 16); s = ~((s & 0xFFFF) + (s >> 16)) & 0xFFFF
b = b[:2] + struct.pack("!H", s) + b[4:]
socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).sendto(b, ("198.18.1.2", 0))' 
sleep 0.6 # the status snapshot is refreshed every 250 ms
check "ICMP from r3's own interface still reaches the router (icmp_ignored $before -> $(icmp_ignored))" \
	test "$(icmp_ignored)" -gt "$before"
check "every replica still alive after the forged packets ($(alive_list))" all_alive
touch "$T/held.release"
rc=0
wait "$HELD_PID" || rc=$?
check_eq "the held connection carried on ($(cat "$T/held.json"))" 0 "$rc"

# A fresh connection is served by all three replicas.
rm -f "$T/held.port" "$T/held.release"
timeout 20 "$FTNET" lab exec --name "$LAB" client -- python3 "$E2E_DIR/holdconn.py" --host "$VIP" \
	--port "$PORT" --ready-file "$T/held.port" --release-file "$T/held.release" --max 10 \
	>"$T/fresh.json" 2>"$T/fresh.err" &
HELD_PID=$!
wait_for 10 test -s "$T/held.port" || true
sleep 0.6
conns=$(conns_list)
touch "$T/held.release"
rc=0
wait "$HELD_PID" || rc=$?
check_eq "fresh connection echoed ($(cat "$T/fresh.json"))" 0 "$rc"
check "the fresh connection is served by all three replicas (connections per replica: $conns)" \
	python3 -c "import sys; c=[int(x) for x in '$conns'.split()]; sys.exit(0 if len(c) == 3 and min(c) >= 1 else 1)"
e2e_finish
