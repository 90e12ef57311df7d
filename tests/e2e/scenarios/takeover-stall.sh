#!/usr/bin/env bash
# takeover.sh with the stall load (see there).
export TAKEOVER_LOAD=stall
exec "$(dirname "${BASH_SOURCE[0]}")/takeover.sh" "$@"
