#!/usr/bin/env bash
# A client that reuses its source port is served by every replica, even one the router took out of
# the earlier connection of that port while its reset could not reach it. Stateless echo service
# (socat), N >= 3, no fault but the test's own link cut. stale_port.py connects from a fixed port
# and echoes; r2's link is cut while the connection is quiet, the client echoes more (r2 is taken
# out of the connection as stalled; the reset the router sends it is lost on the cut link), the
# link is healed and the stateless service takes r2 back. The client then resets its connection
# (its RST reaches only the replicas still in it) and connects again from the same port: r2's
# kernel still holds the first connection, and answers the new SYN with that connection's
# challenge ACK instead of a SYN-ACK. Before, the router dropped that ACK, waited, and declared the
# healthy r2 down for the whole service ("evicted (no_syn_ack)"): in the 1,000-fault campaign,
# four such false verdicts on the web lab's r2, one of which left connections with a single
# replica just before a fault hit it. Now the router resets the stale connection at the ACK
# number it carries, as the client's stack would in SYN-SENT (RFC 9293 §3.10.7.3), and sends the
# SYN again.
# Pass: every echo whole; r2 still held the first connection when the client came back (the case
# is exercised); the second connection reached r2 (its socket there got the new 3,000 bytes);
# nobody evicted after the reconnect, nobody declared down for it.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init stale-port "$@"
[[ $FAULT == none && $N -ge 3 ]] || die "stale-port runs with N >= 3 and no fault"

PORT=7000
SPORT=45123
lab_up --port "$PORT" --stateless --server 'socat TCP-LISTEN:{port},fork,reuseaddr EXEC:cat'
log=/run/ftnet/lab/$LAB/router.log
r2=$(replica_ip 2)
client=198.18.1.2
step() { touch "$T/$1"; }
on_r2() { # on_r2 — r2's sockets of the client's port: "state bytes_received" per line
	"$FTNET" lab exec --name "$LAB" r2 -- ss -tniH "( sport = :$PORT and dport = :$SPORT )" |
		awk '/^[A-Z]/ { st = $1 } / bytes_received:/ { for (i = 1; i <= NF; i++) if ($i ~ /^bytes_received:/) { split($i, a, ":"); b = a[2] } print st, b + 0; b = 0 }'
}

timeout 90 "$FTNET" lab exec --name "$LAB" client -- \
	python3 "$E2E_DIR/stale_port.py" --host "$VIP" --port "$PORT" --sport "$SPORT" --dir "$T" \
	>"$T/client.json" 2>"$T/client.err" &
cpid=$!
wait_for 20 test -e "$T/quiet" || die "client never connected: $(cat "$T/client.err")"
say "r2 holds the connection: $(on_r2 | tr '\n' ' ')"
lab cut --name "$LAB" 2
step cut
wait_for 20 test -e "$T/sent" || die "the echo with r2 cut never came back: $(cat "$T/client.err")"
check "r2 was taken out of the connection" wait_for 10 grep -q "$client:$SPORT->$VIP:$PORT: replica $r2 evicted" "$log"
lab heal --name "$LAB" 2
check "the stateless service took r2 back" wait_for 20 grep -q "replica $r2 answers again" "$log"
sleep 0.5
step healed
wait_for 10 test -e "$T/reset" || die "client never reset: $(cat "$T/client.err")"
sleep 0.3
stale=$(on_r2)
say "r2's sockets of port $SPORT after the client's reset: ${stale//$'\n'/; }"
check "r2 still holds the first connection (the case is exercised)" grep -q '^ESTAB 100$' <<<"$stale"
lines=$(wc -l <"$log")
step again
wait_for 20 test -e "$T/open2" || { step done; die "the second connection failed: $(cat "$T/client.err")"; }
now=$(on_r2)
say "r2's sockets of port $SPORT with the second connection open: ${now//$'\n'/; }"
check "the second connection reached r2 (its socket got the new 3,000 bytes)" grep -q '^ESTAB 3000$' <<<"$now"
step done
rc=0
wait "$cpid" || rc=$?
say "client: $(cat "$T/client.json") $(head -c 500 "$T/client.err")"
check_eq "client exit status (every echo whole)" 0 "$rc"
after=$(tail -n +"$((lines + 1))" "$log")
say "router after the reconnect: $(grep -E 'evicted|declared down|stale' <<<"$after" | head -5)"
check "nobody evicted from the second connection" bash -c "! grep -q 'evicted' <<<\"\$1\"" _ "$after"
check "nobody declared down" bash -c "! grep -q 'declared down' <<<\"\$1\"" _ "$after"
e2e_finish
