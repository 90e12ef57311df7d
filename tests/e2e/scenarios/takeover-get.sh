#!/usr/bin/env bash
# takeover.sh with the get load (see there).
export TAKEOVER_LOAD=get
exec "$(dirname "${BASH_SOURCE[0]}")/takeover.sh" "$@"
