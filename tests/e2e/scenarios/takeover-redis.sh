#!/usr/bin/env bash
# takeover.sh with the redis load (see there).
export TAKEOVER_LOAD=redis
exec "$(dirname "${BASH_SOURCE[0]}")/takeover.sh" "$@"
