#!/usr/bin/env bash
# (f) The lab leaves nothing behind. `ftnet lab run` is interrupted twice: once with SIGINT
# (Ctrl-C) and once with SIGKILL (a crash of the lab itself, where only its reaper can clean up).
# Pass: after each, no namespace, router or server process, status socket or lab directory of
# that lab remains, and no policy rule leaked into the caller's namespace.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init hygiene "$@"

rules_before=$(ip rule show | wc -l)

leftovers() {
	{
		ip netns list | grep -E "^ftnet-$LAB-" || true
		pgrep -af "/run/ftnet/lab/$LAB/" || true
		[[ -e /run/ftnet/lab/$LAB ]] && echo "/run/ftnet/lab/$LAB"
	} | sed '/^$/d'
}
no_leftovers() { [[ -z $(leftovers) ]]; }

for sig in INT KILL; do
	say "lab run, then SIG$sig to it once the lab is up"
	"$FTNET" lab run --name "$LAB" --replicas "$N" --port 7000 \
		--server 'socat TCP-LISTEN:{port},fork,reuseaddr EXEC:cat' -- sleep 60 >"$T/run-$sig.log" 2>&1 &
	pid=$!
	wait_for 30 test -S "/run/ftnet/lab/$LAB/router.sock" || die "lab never came up: $(tail -5 "$T/run-$sig.log")"
	check "namespaces exist while the lab runs" test "$(ip netns list | grep -c "^ftnet-$LAB-")" -eq $((N + 2))
	kill "-$sig" "$pid"
	wait "$pid" 2>/dev/null || true
	if ! wait_for 30 no_leftovers; then
		say "left behind after SIG$sig: $(leftovers | tr '\n' ' ')"
	fi
	check_eq "nothing left behind after SIG$sig" "" "$(leftovers)"
done
check_eq "no policy rule leaked into the caller's namespace" "$rules_before" "$(ip rule show | wc -l)"
exit $((FAILS > 0))
