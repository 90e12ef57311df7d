#!/usr/bin/env bash
# takeover.sh with the synack load (see there).
export TAKEOVER_LOAD=synack
exec "$(dirname "${BASH_SOURCE[0]}")/takeover.sh" "$@"
