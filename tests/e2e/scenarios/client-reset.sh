#!/usr/bin/env bash
# Clients that reset their connections at once cannot stop a replica's server, nor leave the
# replicas with different input. Redis × N under the shim (the sequencer orders the input), no
# fault. resetstorm.py, ROUNDS rounds: half of them write a SET and reset the connection (a RST,
# SO_LINGER 0) without reading the reply, half connect and reset at once (a TCP health check).
# Such a connection is often reset before a replica's shim took it from the kernel: Linux still
# queues it, and accept(2) reports its peer while getpeername(2) fails (ENOTCONN). Before, the
# shim dropped it as "not IPv4" and its accept event held every later event of that server for
# ever, without a word (the router still showed the replica serving, lag 0).
# Every third round reuses its port at once (--reuse): a client resets a connection and connects
# again from the same port. A replica's server may still hold the first connection when the
# second's accept event reaches its shim; before, the shim took that accept for a router's
# repeat and dropped it, and handed the new connection out unordered 2 s later.
# The router drops every 3rd pure ACK it writes to the last replica (--fault-drop N:3:acks), the
# last ACK of some handshakes among them: that replica's connection is still in SYN-RECEIVED when
# the client's reset comes, and the reset drops it, so its kernel never gives it to the shim, while
# the router numbered its accept. Before, its shim waited 10 s for that connection, then gave the
# order up (a healthy replica left the group: campaign fault #964). Now the router numbers the
# client's reset too, and the shim gives its server a stand-in that reads as reset.
# Pass: the storm ran without error; then a marker SET through the VIP reaches every replica's
# server within 10 s; nobody was evicted; no shim lost the order or handed a connection out
# unordered; the N digests are equal.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init client-reset "$@"
[[ $FAULT == none && $N -ge 2 ]] || die "client-reset runs with N >= 2 and no fault"

REDIS_PORT=6379
ROUNDS=$(quick 200 400)
lab_up --port "$REDIS_PORT" --shim --fault-drop "$N:3:acks"
rc=0
timeout 120 "$FTNET" lab exec --name "$LAB" client -- \
	python3 "$E2E_DIR/resetstorm.py" --host "$VIP" --port "$REDIS_PORT" --rounds "$ROUNDS" --seconds 60 --reuse \
	>"$T/storm.json" 2>"$T/storm.err" || rc=$?
say "storm: $(cat "$T/storm.json") (exit $rc)"
check_eq "the resetting clients connected without error" 0 "$rc"
marker=$(date +%s%N)
got=$(timeout 20 "$FTNET" lab exec --name "$LAB" client -- redis-cli -h "$VIP" -p "$REDIS_PORT" SET client-reset:marker "$marker" | tr -d "\r") || got="no answer in 20 s"
check_eq "a SET through the VIP after the storm is answered" OK "$got"
for ((r = 1; r <= N; r++)); do
	check "r$r's server took the marker (its input order goes on after the storm)" \
		wait_for 10 bash -c "[[ \$(timeout 5 '$FTNET' lab exec --name '$LAB' r$r -- redis-cli -p $REDIS_PORT GET client-reset:marker | tr -d '\r') == '$marker' ]]"
done
log=/run/ftnet/lab/$LAB/router.log
check "nobody evicted" bash -c "! grep -q 'evicted' '$log'"
for ((r = 1; r <= N; r++)); do
	check "r$r's shim kept the order" bash -c "! grep -q 'ORDER LOST' '$(replica_dir "$r")/server.log'"
	check "r$r's shim handed out no connection unordered" bash -c "! grep -q 'handed out unordered' '$(replica_dir "$r")/server.log'"
done
stood=$(grep -c 'gets a stand-in' "$(replica_dir "$N")/server.log" || true)
say "r$N's shim gave its server $stood stand-in(s) for connections reset before its kernel gave them"
check "the dropped handshake ACKs left some connection to r$N reset in SYN-RECEIVED (the case is exercised)" test "$stood" -ge 1
settle $(seq 1 "$N")
for ((r = 1; r <= N; r++)); do say "r$r: $(redis_at "$r" DBSIZE | tr -d '\r') keys"; done
same_digests "after the storm" $(seq 1 "$N")
e2e_finish
