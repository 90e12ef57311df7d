#!/usr/bin/env bash
# takeover.sh with the connect load (see there).
export TAKEOVER_LOAD=connect
exec "$(dirname "${BASH_SOURCE[0]}")/takeover.sh" "$@"
