#!/usr/bin/env bash
# Loss between the client and the router: nftables in the router's namespace drops 2 % of the
# client's data segments to the VIP as they arrive (at random; pure ACKs pass) while
# stallmeter.py streams 4 KB every 1 ms through the socat echo service for 6 s.
# Every replica lacks each lost segment and repeats its ACK for every later one. The client must
# get one duplicate ACK per segment it sent, as from one TCP receiver: given one from every
# replica, it counts more duplicate ACKs than it has segments in flight, Linux takes that for
# reordering and raises the connection's duplicate-ACK threshold (tcp_info `reordering`, 3 at
# the start) to as much as 300, and from then on every lost segment waits for a retransmission
# timeout (200 ms or more) instead of going again at the third duplicate ACK — the same wait
# after every router takeover, whose in-flight segments die with the router.
# Pass: the echo stream intact; segments were lost and sent again (the loss took effect); in a
# capture of what the client got (tcpdump, dupacks.py), at no ACK number more duplicate ACKs than
# segments it sent beyond it, plus 3 after it fell silent, with a margin of 3 (before: up to 900
# more). Reported: the client's `reordering` at the end (Linux may also raise it on its own
# timestamp heuristics), the longest gap, the retransmissions.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init client-loss "$@"
[[ $FAULT == none ]] || die "client-loss injects its own loss; run it with fault none"
command -v nft >/dev/null || die "nft not found: apt-get install -y nftables (scripts/deps.sh installs it)"
command -v tcpdump >/dev/null || die "tcpdump not found: apt-get install -y tcpdump (scripts/deps.sh installs it)"

PORT=7000
PERMILLE=${FTNET_E2E_CLIENT_LOSS_PERMILLE:-20}
lab_up --port "$PORT" --server "socat -t 60 TCP-LISTEN:{port},fork,reuseaddr EXEC:cat"

# On the wire, as the router's host takes them in (prerouting in its namespace; the table goes
# with the namespace). Not in the client's own output hook: a segment dropped there never left,
# and TCP sends it again as new, with no loss to recover from.
in_ns router nft -f - <<NFT
table inet ftnet_loss {
	chain pre {
		type filter hook prerouting priority -300; policy accept;
		ip daddr $VIP tcp dport $PORT meta length > 100 numgen random mod 1000 < $PERMILLE counter drop
	}
}
NFT

# What the client gets, as it gets it (headers only).
# (It ends itself, after the stream: 6 s of sending and the drain.)
in_ns client timeout -s INT 10 tcpdump -i any -nn -Z root -s 128 -U -w "$T/client.pcap" "tcp port $PORT" >"$T/tcpdump.err" 2>&1 &
cap=$!
wait_for 5 grep -q "listening on" "$T/tcpdump.err" || die "tcpdump did not start: $(cat "$T/tcpdump.err")"
rc=0
timeout 120 "$FTNET" lab exec --name "$LAB" client -- \
	python3 "$E2E_DIR/stallmeter.py" --host "$VIP" --port "$PORT" --chunk 4096 --interval-ms 1 \
	--duration 6 --warmup 0.5 >"$T/stall.json" 2>"$T/stall.err" || rc=$?
wait "$cap" 2>/dev/null || true
dropped=$(in_ns router nft list chain inet ftnet_loss pre | grep -o 'packets [0-9]*' | awk '{print $2}')
[[ -s $T/stall.err ]] && say "stallmeter stderr: $(head -c 2000 "$T/stall.err")"
say "stallmeter: $(cat "$T/stall.json")"
check_eq "stallmeter exit status (echo stream intact)" 0 "$rc"
client=$(tcpdump -nn -r "$T/client.pcap" -c 1 2>/dev/null | grep -o '198\.18\.1\.2\.[0-9]*' | head -1)
tcpdump -S -nn -tt -r "$T/client.pcap" 2>/dev/null | python3 "$E2E_DIR/dupacks.py" --client "$client" >"$T/dupacks.json" || true
read -r reord retrans maxgap p99 < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(r.get("tcp_reordering"), r.get("tcp_total_retrans"), r.get("max_gap_ms"), r.get("p99_gap_ms"))' "$T/stall.json" 2>/dev/null || echo "None None None None")
read -r excess dups segs < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(r["worst_excess"], r["duplicate_acks"], r["client_segments"])' "$T/dupacks.json" 2>/dev/null || echo "None None None")
say "LOSS ${PERMILLE}/1000 of the client's data segments: ${dropped:-?} dropped, ${retrans} sent again; ${dups} duplicate ACKs for ${segs} client segments, worst excess ${excess}; client's reordering ${reord}; longest gap ${maxgap} ms, p99 ${p99} ms"
check "the loss took effect (segments dropped: ${dropped:-none})" test "${dropped:-0}" -gt 0
check "the client sent lost segments again (${retrans})" test "$retrans" != None -a "${retrans/None/0}" -gt 0
check "the capture was read (${segs} client segments)" test "$segs" != None -a "${segs/None/0}" -gt 100
check "no more duplicate ACKs at an ACK than segments the client sent beyond it, plus 3 once it fell silent (worst excess ${excess} <= 3)" \
	test "$excess" != None -a "${excess/None/99}" -le 3
e2e_finish
