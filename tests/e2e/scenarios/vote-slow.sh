#!/usr/bin/env bash
# Output voting with a slow replica: three nginx replicas under the shim (their `Date:` from the
# router's clock, so a late reply is the same reply) with `vote = "majority"`. r3's nginx is
# stopped (SIGSTOP) for 100 ms out of every 300 ms while one client fetches a 100 MiB file five
# times on one keep-alive connection: a replica that is alive but slow, as one whose CPU is busy.
# The vote keeps the decided bytes for the slowest live replica (at most 16 MiB; one further
# behind is taken out as lagging — at several Gbit/s a 100 ms pause is more than that); the
# others' windows end 8 MiB past the slowest's output, so the group goes at its pace instead of
# leaving it behind. Pass: every copy intact, all three replicas alive, none taken out
# (`evicted`), the pace held the others back (window updates sent once r3 caught up:
# `pace_updates` > 0).
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
export FTNET_E2E_SHIM=1
e2e_init vote-slow "$@"
[[ $N == 3 ]] || die "vote-slow runs with three replicas (a majority against one)"
[[ $FAULT == none ]] || die "vote-slow runs with FAULT=none"

PORT=8080
MB=$(quick 40 100)
GETS=5
big=$(e2e_data "rand-${MB}m" "$MB")
LOG=/run/ftnet/lab/$LAB/router.log

lab_up --port "$PORT" --vote majority --server "$(nginx_server_cmd "$big")"
pids=$(replica_procs 3 nginx)
[[ -n $pids ]] || die "no nginx in r3"
slow() { # stop r3's nginx 100 ms of every 300 ms, at most 200 times (60 s)
	local i
	for ((i = 0; i < 200; i++)); do
		# shellcheck disable=SC2086
		kill -STOP $pids 2>/dev/null || true
		sleep 0.1
		# shellcheck disable=SC2086
		kill -CONT $pids 2>/dev/null || true
		sleep 0.2
	done
}
slow &
slower=$!
urls=()
for i in $(seq "$GETS"); do urls+=(-o "$T/get$i.bin" "http://$VIP:$PORT/big.bin"); done
t0=$(now_ms)
rc=0
codes=$(timeout 300 "$FTNET" lab exec --name "$LAB" client -- \
	curl -sS --max-time 280 -w '%{http_code} %{num_connects}\n' "${urls[@]}" 2>"$T/client.err") || rc=$?
dt=$(($(now_ms) - t0))
kill "$slower" 2>/dev/null || true
wait "$slower" 2>/dev/null || true
# shellcheck disable=SC2086
kill -CONT $pids 2>/dev/null || true
say "$GETS GETs of $MB MiB on one connection took $dt ms ($((GETS * MB * 8388608 / (dt > 0 ? dt : 1) / 1000)) Mbit/s); voted $(lab_counter voted_bytes) bytes, $(lab_counter pace_updates) window update(s) to replicas the slowest held back, $(lab_counter fins_held) client FIN(s) held back from a replica behind"
[[ -s $T/client.err ]] && say "client stderr: $(head -c 2000 "$T/client.err")"
grep -h "evicted\|lagging" "$LOG" | head -3 | sed 's/^/    /' || true
check_eq "curl exit status" 0 "$rc"
check_eq "HTTP status and connections opened" "$(printf '200 1\n'; for _ in $(seq 2 "$GETS"); do printf '200 0\n'; done)" "$codes"
want=$(sha "$big")
for i in $(seq "$GETS"); do check_eq "copy $i sha256" "$want" "$(sha "$T/get$i.bin")"; done
check "no replica taken out of the connection" bash -c "! grep -q 'evicted' '$LOG'"
check_eq "replicas alive" 3 "$(lab_alive)"
check "the slowest held the others back (window updates sent)" test "$(lab_counter pace_updates)" -gt 0
e2e_finish
