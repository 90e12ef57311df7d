#!/usr/bin/env bash
# takeover.sh with the put load (see there).
export TAKEOVER_LOAD=put
exec "$(dirname "${BASH_SOURCE[0]}")/takeover.sh" "$@"
