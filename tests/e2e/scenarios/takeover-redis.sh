#!/usr/bin/env bash
# takeover.sh with the redis load (see there), every Redis under the determinism shim: with 20
# concurrent clients the replicas' replies (INCR values, LPUSH lengths) are byte-identical only
# in the sequencer's order, which must carry over every takeover.
export TAKEOVER_LOAD=redis FTNET_E2E_SHIM=1
exec "$(dirname "${BASH_SOURCE[0]}")/takeover.sh" "$@"
