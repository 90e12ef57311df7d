#!/usr/bin/env bash
# (n) A hostile client (issue 13, item 3): raw packets from the client namespace against its own
# live connection, while other clients use the service.
#
#   ns client 198.18.1.2                 ns router                  ns r1..r3 (redis under the shim)
#  +-------------------------+        +------------------+        +-------------------------+
#  | redis-benchmark INCR    |--veth--| ftnet router     |--veth--| redis-server (ftnet run) |
#  |  (the other clients)    |        | VIP 198.19.0.1   |   ...  | agent                    |
#  | attack_client.py:       |        | sequencer on     |        +-------------------------+
#  |  PING, then raw packets |        +------------------+
#  |  (IP_HDRINCL, no scapy) |
#  +-------------------------+
#
# The attacker opens a normal connection, learns its own sequence numbers from its packets
# (AF_PACKET), and sends: a data segment 256 MiB ahead of its stream (before the fix it got an input
# number for a chunk no replica would ever complete, and every shim waited for it: the whole
# service stalled); two ICMP host-unreachable messages from itself quoting its own connection with
# replicas 2 and 3 as inner destination (before: both replicas marked down); a blind RST 1000 bytes
# ahead of its sequence number (before: the router forgot the connection, which then hung).
# Pass: the attacker's connection still answers PING; the other clients' INCRs during and after
# the attack all complete (no stall) with exact counters on every replica and equal digests; no
# replica is marked down; the router counted the rejected packets (beyond_window, icmp_unverified,
# rst_not_exact).
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init attack-client "$@"
[[ $FAULT == none && $N == 3 ]] || die "attack-client runs with N=3 and no fault"

REDIS_PORT=6379
N1=$(quick 20000 40000)
N2=2000
lab_up --port "$REDIS_PORT" --shim

bench() { # bench OUT N — INCR of one counter from 5 connections
	timeout 40 "$FTNET" lab exec --name "$LAB" client -- \
		redis-benchmark -h "$VIP" -p "$REDIS_PORT" -c 5 -n "$2" -t incr -q >"$1" 2>&1
}

rc1=0
bench "$T/during.out" "$N1" &
bpid=$!
sleep 0.5
arc=0
timeout 20 "$FTNET" lab exec --name "$LAB" client -- \
	python3 "$E2E_DIR/attack_client.py" "$VIP" "$REDIS_PORT" "$(replica_ip 2)" "$(replica_ip 3)" \
	>"$T/attack.out" 2>&1 || arc=$?
sed 's/^/  attacker: /' "$T/attack.out"
wait "$bpid" || rc1=$?
say "during the attack: $(rps "$T/during.out")"
t0=$(now_ms)
rc2=0
bench "$T/after.out" "$N2" || rc2=$?
say "after the attack: $(rps "$T/after.out")($(($(now_ms) - t0)) ms)"

check_eq "attacker's connection still answers after the blind RST (attack_client.py exit)" 0 "$arc"
check_eq "other clients during the attack: redis-benchmark exit status (no stall)" 0 "$rc1"
check_eq "other clients after the attack: redis-benchmark exit status" 0 "$rc2"
check "no error in the other clients' output" no_errors "$T/during.out"
check "no error after the attack" no_errors "$T/after.out"

status=$(lab status --name "$LAB" --json)
alive=$(python3 -c "import json,sys; d=json.load(sys.stdin); print(' '.join(str(r['alive']) for r in d['status']['services'][0]['replicas']))" <<<"$status")
check_eq "no replica marked down" "True True True" "$alive"
drops() { python3 -c "import json,sys; d=json.load(sys.stdin); print(dict(d['status']['drops']).get('$1', 0))" <<<"$status"; }
say "router drops: beyond_window=$(drops beyond_window) icmp_unverified=$(drops icmp_unverified) rst_not_exact=$(drops rst_not_exact)"
check "the far-ahead segment was dropped (beyond_window)" test "$(drops beyond_window)" -ge 1
check "the client's ICMP was not believed (icmp_unverified)" test "$(drops icmp_unverified)" -ge 2
check "the blind RST changed nothing (rst_not_exact)" test "$(drops rst_not_exact)" -ge 1

settle 1 2 3
for r in 1 2 3; do
	check_eq "r$r counter exact" $((N1 + N2)) "$(redis_at "$r" GET 'counter:__rand_int__' | tr -d '\r')"
done
same_digests "after the attack" 1 2 3
e2e_finish
