#!/usr/bin/env bash
# The fault campaign, shortened (tests/campaign/campaign.py; the long one is run by hand and its
# result committed under bench/results/campaign-*): FTNET_E2E_CAMPAIGN_FAULTS faults (30) at random
# points, in two HA labs side by side under load (Redis under the shim with 8 writers and a short
# connection every 200 ms; nginx downloads and uploads and echo streams), each a replica kill -9,
# link cut, SIGSTOP, router kill or router cut; the group recovers between faults.
# Pass: every fault recovered from (every replica serving, both routers up, within 60 s); no
# client failure within the fault model (no connection broken, no reply or byte wrong; a
# stateless connection that lived through 3 replica faults has no replica left and is counted
# apart); counters and lists equal what was acknowledged; the three Redis digests equal; every
# acknowledged upload intact. Figures: the stall at each kind of fault and while the group heals
# (p50/p90/max), recovery times, replicas taken out that no fault had hit.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
e2e_init campaign "$@"
[[ $FAULT == none && $N == 3 ]] || die "campaign runs with 3 replicas and injects its own faults"
FAULTS=${FTNET_E2E_CAMPAIGN_FAULTS:-30}
# Two labs of its own, named after this test's lab (<lab>r, <lab>w: at most 8 characters), taken
# down however this script ends (the campaign does it too, unless it is killed).
prefix=${LAB:0:7}
trap 'rc=$?; set +e; for l in "${prefix}r" "${prefix}w"; do timeout 60 "$FTNET" lab down --name "$l" >/dev/null 2>&1; done; (exit $rc); e2e_on_exit' EXIT
rc=0
timeout $((FAULTS * 70 + 300)) python3 "$REPO/tests/campaign/campaign.py" --faults "$FAULTS" --seed "$SEED" \
	--client-retries2 6 --prefix "$prefix" --ftnet "$FTNET" --out "$T/campaign" --work "$T/campaign-work" >"$T/campaign.log" 2>&1 || rc=$?
rm -rf "$T/campaign-work"
sed -n '/^# Fault campaign/,$p' "$T/campaign.log" | sed 's/^/    /'
grep -E "^\[campaign" "$T/campaign.log" | tail -3 | sed 's/^/    /'
if [[ -n ${FTNET_E2E_FIGURES:-} && -f $T/campaign/campaign.md ]]; then
	flock "$FTNET_E2E_FIGURES" sed 's/^/FIGURE campaign /' "$T/campaign/campaign.md" >>"$FTNET_E2E_FIGURES"
fi
if ((rc != 0)); then
	dest=${FTNET_E2E_ARTIFACTS:-/tmp/ftnet-e2e-artifacts}/campaign-n3-none-$LAB
	mkdir -p "$dest" && cp -r "$T/campaign" "$T/campaign.log" "$dest/" 2>/dev/null || true
	say "evidence (router, agent and keepalived logs of both labs, the load's JSON): $dest"
fi
check "the campaign passed (seed $SEED; every fault recovered, nothing lost, broken or wrong)" test "$rc" = 0
e2e_finish
